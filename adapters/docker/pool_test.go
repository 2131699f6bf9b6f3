package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/gantryhq/gantry/adapters/adaptertest"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/pool"
)

// waitTimeout bounds every wait of these tests for a container to do something.
const waitTimeout = 30 * time.Second

// testGrace is the pools' stop grace in these tests: the Engine API counts whole seconds.
const testGrace = time.Second

// absentImage is an image no test builds and no registry has.
const absentImage = "gantry-dockertest/absent:never-built"

var (
	gpuPool = core.PoolInfo{GPUType: "NVIDIA Test GPU", GPUs: 4, CUDAVersions: []string{"12.4", "11.8", "12.4"}, DataCenter: "LOCAL"}
	cpuPool = core.PoolInfo{GPUType: "CPU", GPUs: 2, CPU: true, DataCenter: "LOCAL"}
)

// TestPoolContract runs the adapter kit against a real engine: a pool of (pretend) GPUs handed
// over through NVIDIA_VISIBLE_DEVICES, suspending by pausing, and a pool of CPU slots
// suspending by stopping and keeping containers.
func TestPoolContract(t *testing.T) {
	t.Parallel()
	requireEngine(t)
	for _, tc := range []struct {
		name string
		desc core.PoolInfo
		mode SuspendMode
	}{
		{"gpu-pause", gpuPool, SuspendPause},
		{"cpu-stop", cpuPool, SuspendStop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			adaptertest.Run(t, harness(tc.desc, tc.mode))
		})
	}
}

// kitPools holds the pool each kit subtest made, for the harness's Probe.
var kitPools sync.Map // *testing.T -> *Pool

// harness is the kit's harness for a Docker pool described by desc.
func harness(desc core.PoolInfo, mode SuspendMode) adaptertest.Harness {
	args := map[adaptertest.Behaviour]string{
		adaptertest.Serves:      "serves",
		adaptertest.Crashes:     "crashes",
		adaptertest.IgnoresStop: "ignores",
	}
	return adaptertest.Harness{
		New: func(t *testing.T) pool.Pool {
			d := desc
			d.ID = testPoolID("kit")
			p := newPool(t, Config{Pool: d, GPUsByEnv: true, Suspend: mode, StopGrace: testGrace, LogDir: t.TempDir()})
			kitPools.Store(t, p)
			t.Cleanup(func() { kitPools.Delete(t) })
			return p
		},
		Spec: func(t *testing.T, b adaptertest.Behaviour) pool.WorkerSpec {
			if b == adaptertest.Unstartable {
				return pool.WorkerSpec{Image: absentImage, Endpoint: "ep"}
			}
			return pool.WorkerSpec{Image: engine.image, Args: args[b], Endpoint: "ep", Env: map[string]string{"KIT": "1"}}
		},
		Probe: func(t *testing.T, spec pool.WorkerSpec) (map[string]string, bool) {
			p, _ := kitPools.Load(t)
			return probeEnv(t, p.(*Pool), spec.ID)
		},
		DeviceEnv: func(gpus []int) map[string]string {
			ids := make([]string, len(gpus))
			for i, g := range gpus {
				ids[i] = strconv.Itoa(g)
			}
			return map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(ids, ",")}
		},
		StopGrace: testGrace,
		Timeout:   waitTimeout,
	}
}

// probeEnv returns the environment a test worker printed to its log, and whether it has.
func probeEnv(t *testing.T, p *Pool, id string) (map[string]string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := p.Logs(ctx, id, 0)
	if err != nil {
		return nil, false
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if j, ok := strings.CutPrefix(sc.Text(), "GANTRY_TEST_ENV "); ok {
			env := map[string]string{}
			if err := json.Unmarshal([]byte(j), &env); err != nil {
				t.Fatalf("worker %s printed %q: %v", id, sc.Text(), err)
			}
			return env, true
		}
	}
	return nil, false
}

// newPool returns a pool on the test engine; at the end of the test it is closed, and any
// container left with its id is removed.
func newPool(t *testing.T, cfg Config) *Pool {
	t.Helper()
	requireEngine(t)
	p, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	t.Cleanup(func() {
		removeLabelled(t, p.desc.ID)
		p.Close()
	})
	return p
}

// removeLabelled removes the containers of pool id that a failed test may have left.
func removeLabelled(t *testing.T, pl string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	list, err := engine.api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelPool+"="+pl)})
	if err != nil {
		t.Errorf("listing the containers of pool %s: %v", pl, err)
		return
	}
	for _, c := range list.Items {
		t.Errorf("container %s (%v) of pool %s is left after the test; removing it", c.ID[:12], c.Names, pl)
		_, _ = engine.api.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
	}
}

// fixture is a pool for one test, with a recorder for its events; its cleanup stops the
// workers left and waits for them.
type fixture struct {
	t    *testing.T
	pool *Pool
	rec  *adaptertest.Recorder
	n    int
}

func setup(t *testing.T, cfg Config) *fixture {
	t.Helper()
	if cfg.Pool.GPUType == "" {
		cfg.Pool = cpuPool
	}
	cfg.Pool.ID = testPoolID("test")
	cfg.StopGrace = testGrace
	f := &fixture{t: t, pool: newPool(t, cfg), rec: &adaptertest.Recorder{}}
	t.Cleanup(func() { // before the pool's own cleanup, which checks that nothing is left
		for _, w := range f.pool.live.All() {
			_ = f.pool.Stop(context.Background(), w.id)
			f.rec.Wait(t, w.id, pool.WorkerExited, waitTimeout)
		}
	})
	return f
}

// spec returns a spec for the test worker in mode, with a fresh id, reporting to the recorder.
func (f *fixture) spec(mode string) pool.WorkerSpec {
	f.n++
	id := "w" + strconv.Itoa(f.n)
	return pool.WorkerSpec{
		ID: id, Endpoint: "ep-test", Image: engine.image, Args: mode,
		Report: f.rec.Report, Env: map[string]string{"GREETING": "hello world", "RUNPOD_POD_ID": id},
	}
}

// start starts a worker and waits for its WorkerRunning event.
func (f *fixture) start(spec pool.WorkerSpec) pool.WorkerEvent {
	f.t.Helper()
	if err := f.pool.Start(context.Background(), spec); err != nil {
		f.t.Fatalf("Start(%s, %s %s) = %v", spec.ID, spec.Image, spec.Args, err)
	}
	return f.rec.Wait(f.t, spec.ID, pool.WorkerRunning, waitTimeout)
}

// inspect returns a worker's container, or ok=false when there is none.
func (f *fixture) inspect(id string) (container.InspectResponse, bool) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	res, err := engine.api.ContainerInspect(ctx, containerName(f.pool.desc.ID, id), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return container.InspectResponse{}, false
	}
	if err != nil {
		f.t.Fatalf("inspecting the container of %s: %v", id, err)
	}
	return res.Container, true
}

// get returns the body of GET http://addr/, or an error.
func get(addr string) (string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestContainer: a worker's container carries the pool's labels, the spec's env, args as its
// command, host networking and a bounded log; Stop removes it and reports a clean exit.
func TestContainer(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{Init: true})
	spec := f.spec("serves")
	f.start(spec)
	c, ok := f.inspect(spec.ID)
	if !ok {
		t.Fatalf("no container %s for worker %s", containerName(f.pool.desc.ID, spec.ID), spec.ID)
	}
	wantLabels := map[string]string{LabelManaged: "true", LabelPool: f.pool.desc.ID, LabelWorker: spec.ID, LabelEndpoint: "ep-test"}
	for k, v := range wantLabels {
		if c.Config.Labels[k] != v {
			t.Errorf("label %s = %q; want %q", k, c.Config.Labels[k], v)
		}
	}
	if !slices.Equal(c.Config.Cmd, []string{"serves"}) || !slices.Contains(c.Config.Env, "GREETING=hello world") {
		t.Errorf("container Cmd %q, Env %q; want [serves] and GREETING=hello world", c.Config.Cmd, c.Config.Env)
	}
	if c.HostConfig.NetworkMode != "host" || c.HostConfig.LogConfig.Type != "json-file" || c.HostConfig.LogConfig.Config["max-size"] == "" {
		t.Errorf("container network %q, log %+v; want host and a bounded json-file", c.HostConfig.NetworkMode, c.HostConfig.LogConfig)
	}
	if c.HostConfig.Init == nil || !*c.HostConfig.Init {
		t.Errorf("container Init = %v; want true (Config.Init)", c.HostConfig.Init)
	}
	env := probeWait(t, f.pool, spec.ID)
	if env["GREETING"] != "hello world" || env["NVIDIA_VISIBLE_DEVICES"] != "" {
		t.Errorf("worker env GREETING=%q NVIDIA_VISIBLE_DEVICES=%q; want hello world and none on a CPU pool", env["GREETING"], env["NVIDIA_VISIBLE_DEVICES"])
	}
	if err := f.pool.Stop(context.Background(), spec.ID); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	e := f.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout)
	if !e.Stopped || e.Err != nil {
		t.Errorf("exit after Stop: Stopped=%v Err=%v; want true, nil", e.Stopped, e.Err)
	}
	if _, ok := f.inspect(spec.ID); ok {
		t.Errorf("the container of %s is still there after its WorkerExited; want it removed", spec.ID)
	}
}

// probeWait waits until the worker printed its environment.
func probeWait(t *testing.T, p *Pool, id string) (env map[string]string) {
	t.Helper()
	testkit.EventuallyWithin(t, waitTimeout, "worker "+id+" prints its env", func() bool {
		var ok bool
		env, ok = probeEnv(t, p, id)
		return ok
	})
	return env
}

// TestCrashLog: a crashed worker's error names its status and quotes its last lines; its log
// is saved in the log directory and readable through Logs, whole or its tail; with no log
// directory the error says the log is gone.
func TestCrashLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := setup(t, Config{LogDir: dir})
	spec := f.spec("talks")
	f.start(spec)
	e := f.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout)
	var exit *ExitError
	if e.Stopped || !errors.As(e.Err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("talks worker exited with Stopped=%v, Err=%v; want an *ExitError with status 3", e.Stopped, e.Err)
	}
	path := filepath.Join(dir, spec.ID+".log")
	for _, want := range []string{"exit status 3", "out 3", "err 3", "log: " + path} {
		if !strings.Contains(e.Err.Error(), want) {
			t.Errorf("Err = %q; want it to contain %q", e.Err, want)
		}
	}
	if _, ok := f.inspect(spec.ID); ok {
		t.Errorf("the crashed worker's container is still there; want it removed")
	}
	all := readLogs(t, f.pool, spec.ID, 0)
	got := strings.Split(strings.TrimSpace(all), "\n")
	slices.Sort(got)
	if want := []string{"err 1", "err 2", "err 3", "out 1", "out 2", "out 3"}; !slices.Equal(got, want) {
		t.Errorf("Logs(%s, 0) lines (sorted) = %q; want %q", spec.ID, got, want)
	}
	if tail := readLogs(t, f.pool, spec.ID, 2); strings.Count(tail, "\n") != 2 || !strings.HasSuffix(all, tail) {
		t.Errorf("Logs(%s, 2) = %q; want the last 2 lines of %q", spec.ID, tail, all)
	}
	if _, err := f.pool.Logs(context.Background(), "never-ran", 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Logs(never-ran) = %v; want an error wrapping fs.ErrNotExist", err)
	}
	if _, err := f.pool.Logs(context.Background(), "../etc/passwd", 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Logs(../etc/passwd) = %v; want an error wrapping fs.ErrNotExist", err)
	}

	g := setup(t, Config{})
	spec = g.spec("talks")
	g.start(spec)
	e = g.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout)
	if e.Err == nil || !strings.Contains(e.Err.Error(), "log directory") || !strings.Contains(e.Err.Error(), "err 3") {
		t.Errorf("Err without a log directory = %v; want the last lines and a hint to set a log directory", e.Err)
	}
	if _, err := g.pool.Logs(context.Background(), spec.ID, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Logs of an exited worker without a log directory = %v; want an error wrapping fs.ErrNotExist", err)
	}
}

func readLogs(t *testing.T, p *Pool, id string, tail int) string {
	t.Helper()
	rc, err := p.Logs(context.Background(), id, tail)
	if err != nil {
		t.Fatalf("Logs(%s, %d) = %v", id, tail, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading Logs(%s, %d): %v", id, tail, err)
	}
	return string(b)
}

// TestSuspendKeepsContainer: in both suspend modes a suspended worker keeps its container
// (paused, or stopped), and a resumed one answers HTTP again on the same address; with
// SuspendStop the worker started again (it printed its env twice). Neither is an exit.
func TestSuspendKeepsContainer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode   SuspendMode
		status string // the container's while suspended
		starts int    // how many times the worker started
	}{
		{SuspendPause, "paused", 1},
		{SuspendStop, "exited", 2},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()
			f := setup(t, Config{Suspend: tc.mode, LogDir: t.TempDir()})
			spec := f.spec("serves")
			spec.PortEnv = map[string]int{"PORT": 80, "PORT_HEALTH": 80}
			running := f.start(spec)
			addr := running.Addrs[80]
			testkit.EventuallyWithin(t, waitTimeout, "worker answers on "+addr, func() bool { body, err := get(addr); return err == nil && body == "ok "+spec.ID+"\n" })
			if err := f.pool.Suspend(context.Background(), spec.ID); err != nil {
				t.Fatalf("Suspend = %v", err)
			}
			f.rec.Wait(t, spec.ID, pool.WorkerSuspended, waitTimeout)
			if c, ok := f.inspect(spec.ID); !ok || string(c.State.Status) != tc.status {
				t.Fatalf("suspended worker's container: found %v, state %+v; want it kept, %s", ok, c.State, tc.status)
			}
			if err := f.pool.Resume(context.Background(), spec.ID); err != nil {
				t.Fatalf("Resume = %v", err)
			}
			f.rec.Wait(t, spec.ID, pool.WorkerResumed, waitTimeout)
			testkit.EventuallyWithin(t, waitTimeout, "resumed worker answers on "+addr, func() bool { body, err := get(addr); return err == nil && body == "ok "+spec.ID+"\n" })
			if n := strings.Count(readLogs(t, f.pool, spec.ID, 0), "GANTRY_TEST_ENV"); n != tc.starts {
				t.Errorf("the worker started %d times; want %d", n, tc.starts)
			}
			if err := f.pool.Suspend(context.Background(), spec.ID); err != nil {
				t.Fatalf("second Suspend = %v", err)
			}
			if err := f.pool.Stop(context.Background(), spec.ID); err != nil {
				t.Fatalf("Stop of a suspended worker = %v", err)
			}
			e := f.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout)
			if !e.Stopped || e.Err != nil {
				t.Errorf("exit after Stop: Stopped=%v Err=%v; want true, nil", e.Stopped, e.Err)
			}
			if _, ok := f.inspect(spec.ID); ok {
				t.Errorf("the container is still there after Stop; want it removed")
			}
			var states []pool.WorkerState
			for _, e := range f.rec.Events(spec.ID) {
				states = append(states, e.State)
			}
			want := []pool.WorkerState{pool.WorkerRunning, pool.WorkerSuspended, pool.WorkerResumed, pool.WorkerSuspended, pool.WorkerExited}
			if !slices.Equal(states, want) {
				t.Errorf("events %s; want %v", adaptertest.FormatEvents(f.rec.Events(spec.ID)), want)
			}
		})
	}
}

// TestCleanupAtNew: New removes the containers an earlier run left for its pool (saving their
// logs and logging each), and leaves other pools' containers alone.
func TestCleanupAtNew(t *testing.T) {
	t.Parallel()
	requireEngine(t)
	ctx := context.Background()
	mine, other := testPoolID("cleanup"), testPoolID("other")
	var ids []string
	for _, pl := range []string{mine, other} {
		created, err := engine.api.ContainerCreate(ctx, client.ContainerCreateOptions{
			Name: containerName(pl, "old-1"),
			Config: &container.Config{Image: engine.image, Cmd: []string{"serves"}, Labels: map[string]string{
				LabelManaged: "true", LabelPool: pl, LabelWorker: "old-1", LabelEndpoint: "ep-old"}},
			HostConfig: &container.HostConfig{NetworkMode: "host"},
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, created.ID)
		t.Cleanup(func() { _, _ = engine.api.ContainerRemove(ctx, created.ID, client.ContainerRemoveOptions{Force: true}) })
		if _, err := engine.api.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var logged strings.Builder
	var mu sync.Mutex
	dir := t.TempDir()
	testkit.EventuallyWithin(t, waitTimeout, "the leftover prints its env", func() bool {
		rc, err := engine.api.ContainerLogs(ctx, ids[0], client.ContainerLogsOptions{ShowStdout: true})
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		return strings.Contains(string(b), "GANTRY_TEST_ENV")
	})
	p := newPool(t, Config{Pool: core.PoolInfo{ID: mine, GPUType: "CPU", GPUs: 1, CPU: true}, LogDir: dir,
		Log: slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logged.Write(b)
		}), nil))})
	if n := len(p.live.All()); n != 0 {
		t.Errorf("New adopted %d workers; want none", n)
	}
	if _, err := engine.api.ContainerInspect(ctx, ids[0], client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("the leftover of pool %s after New: inspect = %v; want it removed", mine, err)
	}
	if _, err := engine.api.ContainerInspect(ctx, ids[1], client.ContainerInspectOptions{}); err != nil {
		t.Errorf("the container of another pool after New: inspect = %v; want it left alone", err)
	}
	mu.Lock()
	msg := logged.String()
	mu.Unlock()
	if !strings.Contains(msg, "removed a worker container an earlier run left") || !strings.Contains(msg, "worker=old-1") {
		t.Errorf("New logged %q; want the removal of worker old-1", msg)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "old-1.log")); err != nil || !strings.Contains(string(b), "GANTRY_TEST_ENV") {
		t.Errorf("the leftover's saved log: %q, %v; want its output", b, err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestUnpullable: an image the host lacks and cannot pull fails Start with a clear error (or,
// with PullNever, one saying the pool does not pull), sends no event and holds no device.
func TestUnpullable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pull PullPolicy
		want string
	}{
		{PullMissing, `image "` + absentImage + `" is not on this Docker host and could not be pulled: `},
		{PullNever, `image "` + absentImage + `" is not on this Docker host, and the pool does not pull images`},
	} {
		t.Run(string(tc.pull), func(t *testing.T) {
			t.Parallel()
			f := setup(t, Config{Pool: core.PoolInfo{GPUType: "T", GPUs: 1}, GPUsByEnv: true, Pull: tc.pull})
			spec := f.spec("serves")
			spec.Image, spec.GPUs = absentImage, []int{0}
			if err := f.pool.Start(context.Background(), spec); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Start(%s) = %v; want an error containing %q", absentImage, err, tc.want)
			}
			if evs := f.rec.Events(""); len(evs) > 0 {
				t.Errorf("events after a refused Start: %s; want none", adaptertest.FormatEvents(evs))
			}
			next := f.spec("serves")
			next.GPUs = []int{0} // free again
			f.start(next)
		})
	}
}

// TestShutdown: Shutdown stops every worker, a suspended one too, and returns once their
// containers are removed.
func TestShutdown(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{Suspend: SuspendStop})
	a, b := f.spec("serves"), f.spec("ignores")
	f.start(a)
	f.start(b)
	probeWait(t, f.pool, a.ID)
	if err := f.pool.Suspend(context.Background(), a.ID); err != nil {
		t.Fatalf("Suspend = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := f.pool.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	for _, id := range []string{a.ID, b.ID} {
		evs := f.rec.Events(id)
		if last := evs[len(evs)-1]; last.State != pool.WorkerExited || !last.Stopped {
			t.Errorf("worker %s events after Shutdown: %s; want a stopped exit last", id, adaptertest.FormatEvents(evs))
		}
		if _, ok := f.inspect(id); ok {
			t.Errorf("the container of %s is still there after Shutdown", id)
		}
	}
}
