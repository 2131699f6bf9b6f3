package adaptertest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/adapters/adaptertest"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// faultEnv names the fault TestFakePool injects into its pool; TestKitCatches sets it in a
// child test process.
const faultEnv = "ADAPTERTEST_FAULT"

// TestFakePool runs the kit against an in-memory pool, with suspend support and without, on a
// GPU and a CPU pool: the kit passes a pool other than the process one, and the skip paths
// run. With faultEnv set (by TestKitCatches) the pool has that fault and the test must fail.
func TestFakePool(t *testing.T) {
	t.Parallel()
	fault := os.Getenv(faultEnv)
	for _, tc := range []struct {
		name    string
		desc    core.PoolInfo
		suspend bool
	}{
		{"gpu", core.PoolInfo{ID: "fake", Adapter: "fake", GPUType: "Fake GPU", GPUs: 3, CUDAVersions: []string{"11.8", "12.4"}}, true},
		{"cpu-no-suspend", core.PoolInfo{ID: "fake-cpu", Adapter: "fake", GPUType: "CPU", GPUs: 2, CPU: true}, false},
	} {
		if fault != "" && tc.name != "gpu" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			adaptertest.Run(t, fakeHarness(tc.desc, tc.suspend, fault))
		})
	}
}

// TestKitCatches runs TestFakePool in a child process once for each fault a pool could have,
// and checks that the kit fails it, saying why: a kit that finds nothing cannot pass for a
// correct adapter.
func TestKitCatches(t *testing.T) {
	t.Parallel()
	if os.Getenv(faultEnv) != "" {
		t.Skip("in a child process")
	}
	for _, tc := range []struct{ fault, want string }{
		{"double-exit", "comes after exited"},
		{"no-accounting", "want an error wrapping ErrNoCapacity"},
		{"err-after-stop", "want Stopped=true, Err=nil"},
		{"stop-unknown-fails", "of an unknown worker = "},
		{"leak", "goroutines the pool started in its methods still run"},
		{"bound-to-ctx", "exited after Stop with Stopped=false"},
		{"unknown-event", "which Start did not accept"},
		{"no-force", "no exited event within"},
		{"early-force", "want force only after the"},
		{"describe-shared", "want it unchanged"},
		{"no-exit-code", "want it to name the exit status 37"},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestFakePool$", "-test.count=1", "-test.parallel=16")
			cmd.Env = append(os.Environ(), faultEnv+"="+tc.fault)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("TestFakePool with fault %s: err = %v; want a failure saying %q. Output:\n%s", tc.fault, err, tc.want, out)
			}
		})
	}
}

// fakeEnvs holds the environment each fake worker "saw", by worker id, for the harness's Probe.
var fakeEnvs sync.Map

func fakeHarness(desc core.PoolInfo, suspend bool, fault string) adaptertest.Harness {
	grace := 50 * time.Millisecond
	if fault == "early-force" {
		// The kit catches a force before the grace by timing Stop to the exit event: on a
		// loaded machine that event can take longer than 50 ms to arrive, and the early force
		// would pass for a late one.
		grace = 500 * time.Millisecond
	}
	timeout := 5 * time.Second
	if fault != "" {
		timeout = time.Second // the child process waits for what never comes
	}
	return adaptertest.Harness{
		New: func(t *testing.T) pool.Pool {
			return &fakePool{desc: desc, grace: grace, suspend: suspend, fault: fault, workers: map[string]*fakeWorker{}, held: make([]bool, desc.GPUs)}
		},
		Spec: func(t *testing.T, b adaptertest.Behaviour) pool.WorkerSpec {
			return pool.WorkerSpec{Image: b.String(), Env: map[string]string{"FAKE": "1"}}
		},
		Probe: func(t *testing.T, spec pool.WorkerSpec) (map[string]string, bool) {
			env, ok := fakeEnvs.Load(spec.ID)
			if !ok {
				return nil, false
			}
			return env.(map[string]string), true
		},
		DeviceEnv: func(gpus []int) map[string]string {
			return map[string]string{"CUDA_VISIBLE_DEVICES": fmt.Sprint(gpus)}
		},
		StopGrace: grace,
		Timeout:   timeout,
	}
}

// fakePool runs pretend workers as goroutines; fault, when not "", breaks it on purpose.
type fakePool struct {
	desc    core.PoolInfo
	grace   time.Duration
	suspend bool
	fault   string

	mu      sync.Mutex // held while reporting: a fake may be simple
	workers map[string]*fakeWorker
	held    []bool
}

type fakeWorker struct {
	spec      pool.WorkerSpec
	term      chan struct{} // the polite stop signal
	kill      chan struct{} // force
	done      chan struct{} // closed once it exited
	stopping  bool
	suspended bool
}

// exitCodeError is a fake exit status.
type exitCodeError int

func (e exitCodeError) Error() string { return "exit status " + strconv.Itoa(int(e)) }
func (e exitCodeError) ExitCode() int { return int(e) }

func (p *fakePool) Describe() core.PoolInfo {
	if p.fault == "describe-shared" {
		return p.desc // shares its CUDAVersions with every caller
	}
	d := p.desc
	d.CUDAVersions = slices.Clone(d.CUDAVersions)
	return d
}

func (p *fakePool) report(w *fakeWorker, state pool.WorkerState, err error) {
	stopped := state == pool.WorkerExited && w.stopping && !errors.Is(err, context.Canceled)
	w.spec.Report(pool.WorkerEvent{Worker: w.spec.ID, State: state, At: time.Now(), Err: err, Stopped: stopped})
}

func (p *fakePool) Start(ctx context.Context, spec pool.WorkerSpec) error {
	if spec.Image == adaptertest.Unstartable.String() {
		return fmt.Errorf("no image %q", spec.Image)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fault != "no-accounting" {
		if len(spec.GPUs) > len(p.held) {
			return fmt.Errorf("too many: %w", pool.ErrNoCapacity)
		}
		for i, g := range spec.GPUs {
			if g < 0 || g >= len(p.held) || p.held[g] || slices.Contains(spec.GPUs[:i], g) {
				return fmt.Errorf("device %d: %w", g, pool.ErrNoCapacity)
			}
		}
		for _, g := range spec.GPUs {
			p.held[g] = true
		}
	}
	w := &fakeWorker{spec: spec, term: make(chan struct{}), kill: make(chan struct{}), done: make(chan struct{})}
	p.workers[spec.ID] = w
	env := map[string]string{}
	for k, v := range spec.Env {
		env[k] = v
	}
	if !p.desc.CPU {
		env["CUDA_VISIBLE_DEVICES"] = fmt.Sprint(spec.GPUs)
	}
	addrs := map[int]string{}
	for k, port := range spec.PortEnv { // a container of its own: ports as asked, on its address
		env[k] = fmt.Sprint(port)
		addrs[port] = fmt.Sprintf("10.0.0.%d:%d", len(p.workers), port)
	}
	fakeEnvs.Store(spec.ID, env)
	spec.Report(pool.WorkerEvent{Worker: spec.ID, State: pool.WorkerRunning, At: time.Now(), Addrs: addrs})
	if p.fault == "unknown-event" {
		spec.Report(pool.WorkerEvent{Worker: spec.ID + "-ghost", State: pool.WorkerRunning, At: time.Now()})
	}
	if p.fault == "leak" {
		go func() { select {} }()
	}
	go func() {
		var err error
		switch spec.Image {
		case adaptertest.Crashes.String():
			err = exitCodeError(adaptertest.CrashStatus)
			if p.fault == "no-exit-code" {
				err = errors.New("it crashed")
			}
		case adaptertest.Serves.String():
			if p.fault == "bound-to-ctx" {
				select {
				case <-ctx.Done():
					err = ctx.Err()
				case <-w.term:
				case <-w.kill:
				}
				break
			}
			select {
			case <-w.term:
			case <-w.kill:
			}
		default:
			<-w.kill
		}
		p.exit(w, err)
	}()
	return nil
}

func (p *fakePool) exit(w *fakeWorker, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fault != "no-accounting" {
		for _, g := range w.spec.GPUs {
			p.held[g] = false
		}
	}
	delete(p.workers, w.spec.ID)
	switch {
	case w.stopping && p.fault == "err-after-stop":
		err = errors.New("signal: terminated")
	case w.stopping && !errors.Is(err, context.Canceled):
		err = nil
	}
	close(w.done)
	p.report(w, pool.WorkerExited, err)
	if p.fault == "double-exit" {
		p.report(w, pool.WorkerExited, err)
	}
}

func (p *fakePool) Stop(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.workers[id]
	if !ok {
		if p.fault == "stop-unknown-fails" {
			return fmt.Errorf("no worker %s", id)
		}
		return nil
	}
	if w.stopping {
		return nil
	}
	w.stopping = true
	close(w.term)
	if p.fault == "early-force" {
		close(w.kill)
		return nil
	}
	if p.fault != "no-force" {
		go func() {
			timer := time.NewTimer(p.grace)
			defer timer.Stop()
			select {
			case <-w.done:
			case <-timer.C:
				close(w.kill)
			}
		}()
	}
	return nil
}

func (p *fakePool) Suspend(_ context.Context, id string) error { return p.pause(id, true) }
func (p *fakePool) Resume(_ context.Context, id string) error  { return p.pause(id, false) }

func (p *fakePool) pause(id string, suspend bool) error {
	if !p.suspend {
		return pool.ErrUnsupported
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.workers[id]
	if !ok {
		return fmt.Errorf("no worker %s", id)
	}
	if w.stopping {
		return fmt.Errorf("worker %s is stopping", id)
	}
	if w.suspended == suspend {
		return nil
	}
	w.suspended = suspend
	state := pool.WorkerResumed
	if suspend {
		state = pool.WorkerSuspended
	}
	p.report(w, state, nil)
	return nil
}

var _ pool.Pool = (*fakePool)(nil)
