package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/adapters/adaptertest"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/pool"
)

// waitTimeout bounds every wait of these tests for a process to do something.
const waitTimeout = 20 * time.Second

// probeScript writes the worker's environment to $PROBE, through a temporary file so that a
// reader never sees half of it.
const probeScript = `env > "$PROBE.tmp" && mv "$PROBE.tmp" "$PROBE"`

// testImages are the workers of these tests, as sh scripts. The long sleeps run in the
// background so that the shell, in `wait`, acts on SIGTERM at once.
var testImages = map[string][]string{
	"test/serves":  {"sh", "-c", `trap 'echo bye; exit 0' TERM; ` + probeScript + `; while :; do sleep 3600 & wait $!; done`},
	"test/ignores": {"sh", "-c", `trap '' TERM; ` + probeScript + `; while :; do sleep 3600 & wait $!; done`},
	"test/crashes": {"sh", "-c", "exit " + strconv.Itoa(adaptertest.CrashStatus)},
	"test/talks":   {"sh", "-c", `echo out; echo err >&2`},
	"test/whoami":  {"sh", "-c", `echo "uid=$(id -u) gid=$(id -g) home=$HOME"`},
	// pids writes "<shell pid> <child pid>" to $PROBE, then serves.
	"test/pids": {"sh", "-c", `trap 'echo bye; exit 0' TERM; sleep 3600 & echo "$$ $!" > "$PROBE.tmp" && mv "$PROBE.tmp" "$PROBE"; while :; do wait $!; done`},
	// orphan leaves a child behind and crashes.
	"test/orphan": {"sh", "-c", `sleep 3600 & echo "$!" > "$PROBE.tmp" && mv "$PROBE.tmp" "$PROBE"; exit 5`},
}

var (
	gpuPool = core.PoolInfo{ID: "gpu", GPUType: "NVIDIA Test GPU", GPUs: 4, CUDAVersions: []string{"12.4", "11.8", "12.4"}, DataCenter: "LOCAL"}
	cpuPool = core.PoolInfo{ID: "local", GPUType: "CPU", GPUs: 2, CPU: true, DataCenter: "LOCAL"}
)

// TestPoolContract runs the adapter kit against a pool of (pretend) GPUs and a pool of CPU
// slots.
func TestPoolContract(t *testing.T) {
	t.Parallel()
	for _, desc := range []core.PoolInfo{gpuPool, cpuPool} {
		t.Run(desc.ID, func(t *testing.T) {
			t.Parallel()
			adaptertest.Run(t, harness(desc))
		})
	}
}

// harness is the kit's harness for a process pool described by desc.
func harness(desc core.PoolInfo) adaptertest.Harness {
	const grace = 300 * time.Millisecond
	images := map[adaptertest.Behaviour]string{
		adaptertest.Serves:      "test/serves",
		adaptertest.Crashes:     "test/crashes",
		adaptertest.IgnoresStop: "test/ignores",
		adaptertest.Unstartable: "test/not-mapped",
	}
	return adaptertest.Harness{
		New: func(t *testing.T) pool.Pool {
			return newPool(t, Config{Pool: desc, Images: testImages, LogDir: t.TempDir(), StopGrace: grace})
		},
		Spec: func(t *testing.T, b adaptertest.Behaviour) pool.WorkerSpec {
			return pool.WorkerSpec{Image: images[b], Env: map[string]string{"PROBE": filepath.Join(t.TempDir(), "env")}}
		},
		Probe: func(t *testing.T, spec pool.WorkerSpec) (map[string]string, bool) {
			b, err := os.ReadFile(spec.Env["PROBE"])
			if err != nil {
				return nil, false
			}
			return parseEnv(string(b)), true
		},
		DeviceEnv: func(gpus []int) map[string]string {
			return map[string]string{"CUDA_VISIBLE_DEVICES": joinInts(gpus)}
		},
		StopGrace: grace,
	}
}

func newPool(t *testing.T, cfg Config) *Pool {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	return p
}

func parseEnv(s string) map[string]string {
	env := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// fixture is a pool for one test, with a recorder for its events; its cleanup stops the
// workers left and waits for them.
type fixture struct {
	t    *testing.T
	pool *Pool
	rec  *adaptertest.Recorder
	dir  string // the workers' probe files
	n    int
}

func setup(t *testing.T, cfg Config) *fixture {
	t.Helper()
	cfg.Images = testImages
	if cfg.Pool.ID == "" {
		cfg.Pool = gpuPool
	}
	f := &fixture{t: t, pool: newPool(t, cfg), rec: &adaptertest.Recorder{}, dir: t.TempDir()}
	t.Cleanup(func() { // before the directories above are removed: the workers write there
		for _, w := range f.pool.live.All() {
			_ = f.pool.Stop(context.Background(), w.id)
			f.rec.Wait(t, w.id, pool.WorkerExited, waitTimeout+f.pool.grace)
		}
	})
	return f
}

// spec returns a spec for image with a fresh id and probe file, reporting to the recorder.
func (f *fixture) spec(image string) pool.WorkerSpec {
	f.n++
	return pool.WorkerSpec{
		ID: fmt.Sprintf("w%d", f.n), Image: image, Report: f.rec.Report,
		Env: map[string]string{"PROBE": filepath.Join(f.dir, fmt.Sprintf("w%d.probe", f.n))},
	}
}

// start starts a worker and waits for its WorkerRunning event.
func (f *fixture) start(spec pool.WorkerSpec) {
	f.t.Helper()
	if err := f.pool.Start(context.Background(), spec); err != nil {
		f.t.Fatalf("Start(%s, %s) = %v", spec.ID, spec.Image, err)
	}
	f.rec.Wait(f.t, spec.ID, pool.WorkerRunning, waitTimeout)
}

// probe waits for the worker to write its probe file and returns it.
func (f *fixture) probe(spec pool.WorkerSpec) string {
	f.t.Helper()
	var s string
	testkit.EventuallyWithin(f.t, waitTimeout, "worker "+spec.ID+" writes "+spec.Env["PROBE"], func() bool {
		b, err := os.ReadFile(spec.Env["PROBE"])
		s = string(b)
		return err == nil
	})
	return s
}

// procState returns the state letter of process pid from /proc ("S", "T", "Z"), "" when it is
// gone.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	_, rest, _ := strings.Cut(string(b[strings.LastIndexByte(string(b), ')')+1:]), " ")
	state, _, _ := strings.Cut(rest, " ")
	return state
}

func TestPoolDeviceEnv(t *testing.T) {
	t.Parallel()
	allowed := []string{"PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH", "GOCOVERDIR", "PWD", "PROBE", "CUDA_VISIBLE_DEVICES", "EXTRA"}
	for _, tc := range []struct {
		pool    core.PoolInfo
		gpus    []int
		env     map[string]string // over PROBE
		want    string            // CUDA_VISIBLE_DEVICES
		present bool
	}{
		{gpuPool, []int{2, 0}, nil, "2,0", true},
		{gpuPool, []int{3}, map[string]string{"CUDA_VISIBLE_DEVICES": "7"}, "3", true}, // the devices win
		{gpuPool, nil, nil, "", true},                                                  // no device: every GPU hidden
		{cpuPool, nil, nil, "", false},
		{cpuPool, nil, map[string]string{"CUDA_VISIBLE_DEVICES": "7"}, "7", true}, // the endpoint's own
	} {
		f := setup(t, Config{Pool: tc.pool})
		spec := f.spec("test/serves")
		spec.GPUs = tc.gpus
		for k, v := range tc.env {
			spec.Env[k] = v
		}
		spec.Env["EXTRA"] = "x"
		f.start(spec)
		env := parseEnv(f.probe(spec))
		if got, ok := env["CUDA_VISIBLE_DEVICES"]; got != tc.want || ok != tc.present {
			t.Errorf("%s pool, GPUs %v, env %v: CUDA_VISIBLE_DEVICES = %q (set: %v); want %q (set: %v)", tc.pool.ID, tc.gpus, tc.env, got, ok, tc.want, tc.present)
		}
		for k := range env {
			if !slices.Contains(allowed, k) {
				t.Errorf("%s pool: the worker sees %s; want only the host's %v and the spec's env", tc.pool.ID, k, hostEnv)
			}
		}
		if err := f.pool.Stop(t.Context(), spec.ID); err != nil {
			t.Fatal(err)
		}
		f.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout)
	}
}

func TestPoolLogs(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	f := setup(t, Config{LogDir: logs})
	talks := f.spec("test/talks")
	f.start(talks)
	if e := f.rec.Wait(t, talks.ID, pool.WorkerExited, waitTimeout); e.Err != nil || e.Stopped {
		t.Errorf("a worker exiting 0 by itself: Exited with Err=%v, Stopped=%v; want nil, false", e.Err, e.Stopped)
	}
	path := filepath.Join(logs, talks.ID+".log")
	if b, err := os.ReadFile(path); err != nil || string(b) != "out\nerr\n" {
		t.Errorf("%s = %q, %v; want the worker's stdout and stderr", path, b, err)
	}

	crashes := f.spec("test/crashes")
	f.start(crashes)
	e := f.rec.Wait(t, crashes.ID, pool.WorkerExited, waitTimeout)
	want := fmt.Sprintf("worker %s exited: exit status %d (log: %s)", crashes.ID, adaptertest.CrashStatus, filepath.Join(logs, crashes.ID+".log"))
	if e.Err == nil || e.Err.Error() != want {
		t.Errorf("crashed worker: Err = %v; want %q", e.Err, want)
	}

	quiet := setup(t, Config{}) // no LogDir: output discarded
	crashes = quiet.spec("test/crashes")
	quiet.start(crashes)
	e = quiet.rec.Wait(t, crashes.ID, pool.WorkerExited, waitTimeout)
	if e.Err == nil || !strings.Contains(e.Err.Error(), "no log") {
		t.Errorf("crashed worker of a pool without LogDir: Err = %v; want it to say there is no log", e.Err)
	}
}

func TestPoolBuiltin(t *testing.T) {
	t.Parallel()
	// A stand-in for this binary: prints its arguments and GOMAXPROCS as `gantry worker echo`
	// would see them.
	self := filepath.Join(t.TempDir(), "gantry")
	if err := os.WriteFile(self, []byte("#!/bin/sh\necho \"$* GOMAXPROCS=$GOMAXPROCS\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	logs := t.TempDir()
	f := setup(t, Config{Self: self, Builtins: []string{"echo"}, LogDir: logs})
	spec := f.spec("gantry/echo")
	spec.Args = "--fast  --x"
	f.start(spec)
	if e := f.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout); e.Err != nil {
		t.Fatalf("built-in worker exited with %v", e.Err)
	}
	b, err := os.ReadFile(filepath.Join(logs, spec.ID+".log"))
	if got, want := strings.TrimSpace(string(b)), "worker echo --fast --x GOMAXPROCS=1"; err != nil || got != want {
		t.Errorf("built-in worker printed %q, %v; want %q", got, err, want)
	}
}

// TestPoolSuspend shows that a suspended worker's processes really are stopped, run again
// once resumed, and that a suspended worker acts on Stop at once (SIGCONT follows SIGTERM)
// rather than being killed after the grace.
func TestPoolSuspend(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	f := setup(t, Config{LogDir: logs, StopGrace: time.Hour})
	spec := f.spec("test/pids")
	f.start(spec)
	var shell, child int
	if _, err := fmt.Sscan(f.probe(spec), &shell, &child); err != nil {
		t.Fatalf("reading the worker's pids: %v", err)
	}
	states := func(want func(string) bool) func() bool {
		return func() bool { return want(procState(shell)) && want(procState(child)) }
	}
	stopped := func(s string) bool { return s == "T" }
	running := func(s string) bool { return s == "S" || s == "R" }

	for round := range 2 {
		if err := f.pool.Suspend(t.Context(), spec.ID); err != nil {
			t.Fatalf("Suspend = %v", err)
		}
		testkit.EventuallyWithin(t, waitTimeout, "the worker's processes stopped (T)", states(stopped))
		if round == 1 {
			break // stop it suspended
		}
		if err := f.pool.Resume(t.Context(), spec.ID); err != nil {
			t.Fatalf("Resume = %v", err)
		}
		testkit.EventuallyWithin(t, waitTimeout, "the worker's processes running again", states(running))
	}
	if err := f.pool.Stop(t.Context(), spec.ID); err != nil {
		t.Fatal(err)
	}
	e := f.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout) // well inside the grace
	if !e.Stopped || e.Err != nil {
		t.Errorf("Exited: Stopped=%v, Err=%v; want true, nil", e.Stopped, e.Err)
	}
	if b, _ := os.ReadFile(filepath.Join(logs, spec.ID+".log")); !strings.HasSuffix(string(b), "bye\n") {
		t.Errorf("worker log = %q; want it to end with the TERM trap's bye", b)
	}
	got := adaptertest.FormatEvents(f.rec.Events(spec.ID))
	if want := "running, suspended, resumed, suspended, exited(stopped)"; got != want {
		t.Errorf("events = %s; want %s", got, want)
	}
}

// TestPoolKillsOrphans shows that a worker's children do not outlive it.
func TestPoolKillsOrphans(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	spec := f.spec("test/orphan")
	f.start(spec)
	f.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout)
	child, err := strconv.Atoi(strings.TrimSpace(f.probe(spec)))
	if err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, waitTimeout, "the orphan killed", func() bool { s := procState(child); return s == "" || s == "Z" })
}

// TestPoolReportCallsPool shows that Report may call the pool back: no lock is held while it
// runs.
func TestPoolReportCallsPool(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	spec := f.spec("test/serves")
	spec.Report = func(e pool.WorkerEvent) {
		if e.State == pool.WorkerRunning {
			_ = f.pool.Suspend(context.Background(), e.Worker)
		}
		if e.State == pool.WorkerSuspended {
			_ = f.pool.Stop(context.Background(), e.Worker)
		}
		f.rec.Report(e)
	}
	started := make(chan error, 1)
	go func() { started <- f.pool.Start(context.Background(), spec) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Start did not return: a Report calling the pool deadlocks it")
	}
	f.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout)
	if got, want := adaptertest.FormatEvents(f.rec.Events(spec.ID)), "running, suspended, exited(stopped)"; got != want {
		t.Errorf("events = %s; want %s", got, want)
	}
}

func TestPoolRefusesDuplicateID(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	spec := f.spec("test/serves")
	f.start(spec)
	err := f.pool.Start(t.Context(), spec)
	if err == nil || errors.Is(err, pool.ErrNoCapacity) || !strings.Contains(err.Error(), spec.ID) {
		t.Errorf("Start of a second worker %s = %v; want an error naming the id", spec.ID, err)
	}
	if n := len(f.rec.Events(spec.ID)); n != 1 {
		t.Errorf("%d events for %s after the refused start; want 1 (running)", n, spec.ID)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string // in the error
	}{
		{Config{Pool: core.PoolInfo{GPUType: "CPU", GPUs: 1}}, "needs an ID"},
		{Config{Pool: core.PoolInfo{ID: "p", GPUs: 1}}, "needs an ID and a GPUType"},
		{Config{Pool: core.PoolInfo{ID: "p", GPUType: "CPU"}}, "count 0"},
		{Config{Pool: core.PoolInfo{ID: "p", GPUType: "CPU", GPUs: 1, PerWorker: -1}}, "maxGpusPerWorker -1"},
		{Config{Pool: core.PoolInfo{ID: "p", GPUType: "CPU", GPUs: 1, Adapter: "docker"}}, `adapter "docker"`},
		{Config{Pool: core.PoolInfo{ID: "p", GPUType: "X", GPUs: 1, CUDAVersions: []string{"12"}}}, `"12" is not major.minor`},
		{Config{Pool: core.PoolInfo{ID: "p", GPUType: "CPU", GPUs: 1}, Builtins: []string{"echo"}}, "need Self"},
		{Config{Pool: core.PoolInfo{ID: "p", GPUType: "CPU", GPUs: 1}, Images: map[string][]string{"a": {}}}, `image "a" maps to no command`},
		{Config{Pool: core.PoolInfo{ID: "p", GPUType: "CPU", GPUs: 1}, StopGrace: -time.Second}, "negative"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v; want an error containing %q", tc.cfg, err, tc.want)
		}
	}

	p := newPool(t, Config{Pool: core.PoolInfo{ID: "p", GPUType: "X", GPUs: 2, CUDAVersions: []string{"12.10", "11.8", "12.4", "12.10"}}})
	d := p.Describe()
	if want := []string{"11.8", "12.4", "12.10"}; !slices.Equal(d.CUDAVersions, want) || d.Adapter != "process" {
		t.Errorf("Describe() = %+v; want CUDA versions %v and adapter process", d, want)
	}
	if p.grace != DefaultStopGrace {
		t.Errorf("stop grace = %v; want the default %v", p.grace, DefaultStopGrace)
	}
}

// TestPoolStopWhileStarting stops a worker whose process is not started yet (Start is blocked
// opening its log, a FIFO nobody reads): Stop answers nil at once, and Start stops the process
// as soon as it is up.
func TestPoolStopWhileStarting(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	f := setup(t, Config{LogDir: logs})
	spec := f.spec("test/serves")
	fifo := filepath.Join(logs, spec.ID+".log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- f.pool.Start(context.Background(), spec) }()
	testkit.EventuallyWithin(t, waitTimeout, "Start registered the worker", func() bool { _, err := f.pool.lookup("finding", spec.ID); return err == nil })
	if err := f.pool.Suspend(t.Context(), spec.ID); err == nil || !strings.Contains(err.Error(), "still starting") {
		t.Errorf("Suspend of a starting worker = %v; want an error saying so", err)
	}
	if err := f.pool.Stop(t.Context(), spec.ID); err != nil {
		t.Errorf("Stop of a starting worker = %v; want nil", err)
	}
	if err := f.pool.Suspend(t.Context(), spec.ID); err == nil || !strings.Contains(err.Error(), "being stopped") {
		t.Errorf("Suspend of a worker being stopped = %v; want an error saying so", err)
	}
	reader, err := os.Open(fifo) // Start goes on
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if err := <-started; err != nil {
		t.Fatalf("Start = %v", err)
	}
	e := f.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout)
	if !e.Stopped || e.Err != nil {
		t.Errorf("Exited: Stopped=%v, Err=%v; want true, nil", e.Stopped, e.Err)
	}
	if got, want := adaptertest.FormatEvents(f.rec.Events(spec.ID)), "running, exited(stopped)"; got != want {
		t.Errorf("events = %s; want %s", got, want)
	}
}
