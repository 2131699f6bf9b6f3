package adaptertest

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/pool"
)

// testDescribe: the description is sane, and the same before and after the pool ran a worker
// and when a caller changed the copy it got.
func testDescribe(t *testing.T, h Harness) {
	f := setup(t, h)
	d := f.pool.Describe()
	if d.ID == "" || d.Adapter == "" || d.GPUType == "" {
		t.Errorf("Describe() = %+v; want an ID, an Adapter and a GPUType", d)
	}
	if d.GPUs <= 0 || d.PerWorker < 0 {
		t.Errorf("Describe() GPUs = %d, PerWorker = %d; want GPUs > 0 and PerWorker >= 0", d.GPUs, d.PerWorker)
	}
	if bad := checkCUDAVersions(d.CUDAVersions); bad != "" {
		t.Errorf("Describe() CUDAVersions = %q: %s", d.CUDAVersions, bad)
	}
	if len(d.CUDAVersions) > 0 {
		d.CUDAVersions[0] = "changed by the caller"
	}
	spec := f.spec(Serves, f.devices(1))
	f.mustStart(spec)
	f.mustStop(spec.ID)
	again := f.pool.Describe()
	if f.elastic { // its count follows the cluster
		again.GPUs = f.desc.GPUs
	}
	if !reflect.DeepEqual(again, f.desc) {
		t.Errorf("Describe() = %+v after a worker ran (and a caller changed its copy); want it unchanged: %+v", again, f.desc)
	}
}

// checkCUDAVersions returns what is wrong with a list of CUDA versions: each "major.minor",
// in ascending order, none twice.
func checkCUDAVersions(vs []string) string {
	prev := [2]int{-1, -1}
	for _, v := range vs {
		maj, mnr, ok := strings.Cut(v, ".")
		a, err1 := strconv.Atoi(maj)
		b, err2 := strconv.Atoi(mnr)
		if !ok || err1 != nil || err2 != nil || a < 0 || b < 0 {
			return "version " + strconv.Quote(v) + " is not major.minor"
		}
		if a < prev[0] || (a == prev[0] && b <= prev[1]) {
			return "not in ascending order, or repeated, at " + strconv.Quote(v)
		}
		prev = [2]int{a, b}
	}
	return ""
}

// testStartStop: a started worker sends one WorkerRunning; after Stop one WorkerExited, stopped
// and without error; a second Stop changes nothing.
func testStartStop(t *testing.T, h Harness) {
	f := setup(t, h)
	spec := f.spec(Serves, f.devices(1))
	f.mustStart(spec)
	f.probe(spec)
	f.mustStop(spec.ID)
	if err := f.stop(spec.ID); err != nil {
		t.Errorf("a second Stop(%s) = %v; want nil", spec.ID, err)
	}
	f.wantEvents(spec.ID, pool.WorkerRunning, pool.WorkerExited)
}

// testCrash: a worker that exits by itself with a non-zero status sends one WorkerExited, not
// stopped, whose error names the status; it is then unknown to Suspend and Resume.
func testCrash(t *testing.T, h Harness) {
	f := setup(t, h)
	spec := f.spec(Crashes, f.devices(1))
	if err := f.start(spec); err != nil {
		t.Fatalf("Start(%s, crashes) = %v; want nil (the crash comes after)", spec.ID, err)
	}
	e := f.rec.Wait(t, spec.ID, pool.WorkerExited, h.Timeout)
	if e.Stopped {
		t.Errorf("crashed worker %s exited with Stopped=true; want false (nobody stopped it)", spec.ID)
	}
	if e.Err == nil {
		t.Fatalf("crashed worker %s exited with Err=nil; want an error naming exit status %d", spec.ID, CrashStatus)
	}
	if !strings.Contains(e.Err.Error(), strconv.Itoa(CrashStatus)) {
		t.Errorf("crashed worker %s: Err = %q; want it to name the exit status %d", spec.ID, e.Err, CrashStatus)
	}
	var coded interface{ ExitCode() int }
	if errors.As(e.Err, &coded) && coded.ExitCode() != CrashStatus {
		t.Errorf("crashed worker %s: Err's ExitCode() = %d; want %d", spec.ID, coded.ExitCode(), CrashStatus)
	}
	f.wantEvents(spec.ID, pool.WorkerRunning, pool.WorkerExited)
	if err := f.stop(spec.ID); err != nil {
		t.Errorf("Stop(%s) of an exited worker = %v; want nil", spec.ID, err)
	}
	if err := f.suspend(spec.ID); err == nil {
		t.Errorf("Suspend(%s) of an exited worker = nil; want an error", spec.ID)
	}
	if err := f.resume(spec.ID); err == nil {
		t.Errorf("Resume(%s) of an exited worker = nil; want an error", spec.ID)
	}
}

// testUnknown: Stop of a worker the pool never saw answers nil; Suspend and Resume answer an
// error naming it (or ErrUnsupported).
func testUnknown(t *testing.T, h Harness) {
	f := setup(t, h)
	id := f.token + "-never-started"
	if err := f.stop(id); err != nil {
		t.Errorf("Stop(%s) of an unknown worker = %v; want nil", id, err)
	}
	for name, fn := range map[string]func(string) error{"Suspend": f.suspend, "Resume": f.resume} {
		err := fn(id)
		if err == nil || (!errors.Is(err, pool.ErrUnsupported) && !strings.Contains(err.Error(), id)) {
			t.Errorf("%s(%s) of an unknown worker = %v; want an error naming the worker, or ErrUnsupported", name, id, err)
		}
	}
}

// testUnstartable: a spec the pool cannot run is refused by Start, sends no event, holds no
// device, and its id is then unknown to Stop.
func testUnstartable(t *testing.T, h Harness) {
	f := setup(t, h)
	spec := f.spec(Unstartable, f.devices(1))
	if err := f.start(spec); err == nil {
		t.Fatalf("Start(%s, image %q) = nil; want an error", spec.ID, spec.Image)
	}
	if err := f.stop(spec.ID); err != nil {
		t.Errorf("Stop(%s) after Start refused it = %v; want nil", spec.ID, err)
	}
	// The refused worker's device is free (the cleanup finds any event sent for it).
	next := f.spec(Serves, f.devices(1))
	f.mustStart(next)
	f.mustStop(next.ID)
}

// testForcedStop: a worker that ignores the polite signal is forced within the grace, and
// (when Probe says it was ready) not before the grace has passed.
func testForcedStop(t *testing.T, h Harness) {
	f := setup(t, h)
	spec := f.spec(IgnoresStop, f.devices(1))
	f.mustStart(spec)
	_, ready := f.probe(spec)
	began := time.Now()
	f.mustStop(spec.ID)
	if took := time.Since(began); ready && took < h.StopGrace {
		t.Errorf("worker %s ignoring the stop signal exited %v after Stop; want force only after the %v grace", spec.ID, took, h.StopGrace)
	}
	f.wantEvents(spec.ID, pool.WorkerRunning, pool.WorkerExited)
}

// suspendOrSkip suspends a worker, or skips the test when the pool answers ErrUnsupported
// (after checking that Resume answers it too).
func (f *fixture) suspendOrSkip(id string) {
	f.t.Helper()
	err := f.suspend(id)
	if errors.Is(err, pool.ErrUnsupported) {
		if err := f.resume(id); !errors.Is(err, pool.ErrUnsupported) {
			f.t.Errorf("Suspend(%s) answered ErrUnsupported but Resume answered %v; want both ErrUnsupported", id, err)
		}
		f.t.Skip("the pool does not suspend workers: Suspend and Resume answer ErrUnsupported")
	}
	if err != nil {
		f.t.Fatalf("Suspend(%s) = %v; want nil or ErrUnsupported", id, err)
	}
	f.rec.Wait(f.t, id, pool.WorkerSuspended, f.h.Timeout)
}

// testSuspendResume: Suspend sends WorkerSuspended, Resume WorkerResumed, and the worker then
// stops as any other.
func testSuspendResume(t *testing.T, h Harness) {
	f := setup(t, h)
	spec := f.spec(Serves, f.devices(1))
	f.mustStart(spec)
	f.probe(spec)
	f.suspendOrSkip(spec.ID)
	if err := f.resume(spec.ID); err != nil {
		t.Fatalf("Resume(%s) = %v; want nil", spec.ID, err)
	}
	f.rec.Wait(t, spec.ID, pool.WorkerResumed, h.Timeout)
	f.mustStop(spec.ID)
	f.wantEvents(spec.ID, pool.WorkerRunning, pool.WorkerSuspended, pool.WorkerResumed, pool.WorkerExited)
}

// testStopSuspended: a suspended worker stops cleanly (stopped, no error) without a Resume.
func testStopSuspended(t *testing.T, h Harness) {
	f := setup(t, h)
	spec := f.spec(Serves, f.devices(1))
	f.mustStart(spec)
	f.probe(spec)
	f.suspendOrSkip(spec.ID)
	f.mustStop(spec.ID)
	f.wantEvents(spec.ID, pool.WorkerRunning, pool.WorkerSuspended, pool.WorkerExited)
}

// testEnv: the worker sees the spec's env verbatim and, on GPU pools, its devices.
func testEnv(t *testing.T, h Harness) {
	if h.Probe == nil {
		t.Skip("Harness.Probe is nil: the environment handed to workers is not checked")
	}
	f := setup(t, h)
	gpus := f.devices(1)
	if n := f.desc.GPUs; !f.desc.CPU && n > 1 {
		gpus = []int{0, n - 1}
	}
	spec := f.spec(Serves, gpus)
	want := map[string]string{
		"GANTRY_ADAPTERTEST_WORKER": spec.ID,
		"GANTRY_ADAPTERTEST_VALUE":  `a b=c 'd' "e" $HOME;`,
	}
	for k, v := range want {
		spec.Env[k] = v
	}
	if !f.desc.CPU && !f.elastic && h.DeviceEnv != nil {
		for k, v := range h.DeviceEnv(gpus) {
			want[k] = v
		}
	}
	f.mustStart(spec)
	env, _ := f.probe(spec)
	for k, v := range want {
		if got, ok := env[k]; !ok || got != v {
			t.Errorf("worker %s (GPUs %v) sees %s=%q (set: %v); want %q", spec.ID, gpus, k, got, ok, v)
		}
	}
	f.mustStop(spec.ID)
}

// testPorts: the ports a spec's PortEnv asks for are reported, each reachable somewhere, on
// WorkerRunning; two variables asking for one port share it; with a Probe, each variable
// the worker sees names a port (the pool may have changed it, as the process pool does).
func testPorts(t *testing.T, h Harness) {
	f := setup(t, h)
	spec := f.spec(Serves, f.devices(1))
	spec.PortEnv = map[string]int{"PORT": 8000, "PORT_HEALTH": 8000, "PORT_ADMIN": 9000}
	f.mustStart(spec)
	running := f.rec.Wait(t, spec.ID, pool.WorkerRunning, f.h.Timeout)
	for _, port := range []int{8000, 9000} {
		if _, _, err := net.SplitHostPort(running.Addrs[port]); err != nil {
			t.Errorf("WorkerRunning.Addrs = %v; want a host:port for %d (%v)", running.Addrs, port, err)
		}
	}
	if len(running.Addrs) != 2 {
		t.Errorf("WorkerRunning.Addrs = %v; want exactly ports 8000 and 9000", running.Addrs)
	}
	if h.Probe != nil {
		env, _ := f.probe(spec)
		for _, k := range []string{"PORT", "PORT_HEALTH", "PORT_ADMIN"} {
			if n, err := strconv.Atoi(env[k]); err != nil || n <= 0 || n > 65535 {
				t.Errorf("worker sees %s=%q; want a port number", k, env[k])
			}
		}
		if env["PORT"] != env["PORT_HEALTH"] {
			t.Errorf("worker sees PORT=%s, PORT_HEALTH=%s; want one port, as both asked for 8000", env["PORT"], env["PORT_HEALTH"])
		}
	}
	f.mustStop(spec.ID)
}

// testCapacity: on GPU pools, a spec asking for too many devices, one out of range, one twice
// or one in use is refused with ErrNoCapacity and holds nothing; devices are free again once
// their holder sent WorkerExited, stopped or crashed.
func testCapacity(t *testing.T, h Harness) {
	f := setup(t, h)
	if f.desc.CPU || f.elastic {
		t.Skip("a CPU or Elastic pool: workers are given no device indices")
	}
	n, last := f.desc.GPUs, f.desc.GPUs-1
	refuse := func(gpus []int, why string) {
		t.Helper()
		spec := f.spec(Serves, gpus)
		if err := f.start(spec); !errors.Is(err, pool.ErrNoCapacity) {
			t.Errorf("Start(GPUs %v) on a pool of %d GPUs (%s) = %v; want an error wrapping ErrNoCapacity", gpus, n, why, err)
		}
	}
	refuse(append(f.devices(n), n), "one more than the pool has")
	refuse([]int{n}, "out of range")
	refuse([]int{-1}, "out of range")
	refuse([]int{0, 0}, "the same device twice")

	holder := f.spec(Serves, []int{last})
	f.mustStart(holder)
	refuse([]int{last}, "in use")
	if n > 1 {
		refuse([]int{0, last}, "one of them in use")
		other := f.spec(Serves, []int{0})
		f.mustStart(other)
		f.mustStop(other.ID)
	}
	f.mustStop(holder.ID)
	again := f.spec(Serves, []int{last})
	f.mustStart(again)
	f.mustStop(again.ID)

	crasher := f.spec(Crashes, []int{last})
	if err := f.start(crasher); err != nil {
		t.Fatalf("Start(%s, crashes, GPUs %v) = %v; want nil", crasher.ID, crasher.GPUs, err)
	}
	f.rec.Wait(t, crasher.ID, pool.WorkerExited, h.Timeout)
	all := f.spec(Serves, f.devices(n)) // every device is free again
	f.mustStart(all)
	f.mustStop(all.ID)
}

// testCapacityRace: on GPU pools, of h.Workers starts racing for device 0 exactly one wins; the
// others answer ErrNoCapacity.
func testCapacityRace(t *testing.T, h Harness) {
	f := setup(t, h)
	if f.desc.CPU || f.elastic {
		t.Skip("a CPU or Elastic pool: workers are given no device indices")
	}
	specs := make([]pool.WorkerSpec, h.Workers)
	for i := range specs {
		specs[i] = f.spec(Serves, []int{0})
	}
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i, spec := range specs {
		wg.Go(func() {
			<-gate
			errs[i] = f.start(spec)
		})
	}
	close(gate)
	wg.Wait()
	winners := 0
	for i, err := range errs {
		switch {
		case err == nil:
			winners++
			f.mustStop(specs[i].ID)
		case !errors.Is(err, pool.ErrNoCapacity):
			t.Errorf("Start(%s, GPUs [0]) racing = %v; want nil or an error wrapping ErrNoCapacity", specs[i].ID, err)
		}
	}
	if winners != 1 {
		t.Errorf("%d of %d starts racing for device 0 succeeded; want exactly 1", winners, len(specs))
	}
}

// testConcurrent: h.Workers workers started at once, each then stopped twice at once while
// being suspended and resumed, each send one WorkerRunning and one stopped WorkerExited.
func testConcurrent(t *testing.T, h Harness) {
	f := setup(t, h)
	specs := make([]pool.WorkerSpec, h.Workers)
	for i := range specs {
		specs[i] = f.spec(Serves, nil)
	}
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for _, spec := range specs {
		wg.Go(func() {
			<-gate
			if err := f.start(spec); err != nil {
				t.Errorf("Start(%s) = %v; want nil", spec.ID, err)
				return
			}
			if _, err := f.rec.await(spec.ID, pool.WorkerRunning, h.Timeout); err != nil {
				t.Error(err)
				return
			}
			var ops sync.WaitGroup
			for range 2 {
				ops.Go(func() {
					if err := f.stop(spec.ID); err != nil {
						t.Errorf("Stop(%s) racing = %v; want nil", spec.ID, err)
					}
				})
			}
			ops.Go(func() { _ = f.suspend(spec.ID) }) // may come after the stop: any answer
			ops.Go(func() { _ = f.resume(spec.ID) })
			ops.Wait()
			e, err := f.rec.await(spec.ID, pool.WorkerExited, f.exitWithin())
			if err != nil {
				t.Error(err)
				return
			}
			if !e.Stopped || e.Err != nil {
				t.Errorf("worker %s exited after Stop with Stopped=%v, Err=%v; want Stopped=true, Err=nil%s", spec.ID, e.Stopped, e.Err, stopHint(e))
			}
		})
	}
	close(gate)
	wg.Wait()
	for _, spec := range specs {
		if bad := checkSequence(spec.ID, f.rec.Events(spec.ID), true); bad != "" {
			t.Errorf("worker %s: %s", spec.ID, bad)
		}
	}
}

// testWorkers: a pool that lists its workers (pool.WorkerLister) lists a started worker
// as Known, with its endpoint, and no longer once it exited.
func testWorkers(t *testing.T, h Harness) {
	f := setup(t, h)
	lister, ok := f.pool.(pool.WorkerLister)
	if !ok {
		t.Skip("the pool does not implement pool.WorkerLister")
	}
	spec := f.spec(Serves, f.devices(1))
	f.mustStart(spec)
	f.rec.Wait(t, spec.ID, pool.WorkerRunning, f.h.Timeout)
	listed := func() (pool.LiveWorker, bool) {
		t.Helper()
		var ws []pool.LiveWorker
		err := f.call(func(ctx context.Context) (err error) { ws, err = lister.LiveWorkers(ctx); return err })
		if err != nil {
			t.Fatalf("Workers() = %v", err)
		}
		for _, w := range ws {
			if w.ID == spec.ID {
				return w, true
			}
		}
		return pool.LiveWorker{}, false
	}
	if w, ok := listed(); !ok || !w.Known || w.Endpoint != spec.Endpoint {
		t.Errorf("Workers() lists %s as %+v (listed: %v); want it Known, with endpoint %q", spec.ID, w, ok, spec.Endpoint)
	}
	f.mustStop(spec.ID)
	if w, ok := listed(); ok {
		t.Errorf("Workers() lists %+v after its WorkerExited; want it gone", w)
	}
}
