package adaptertest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// leakLabel is the profiler label key under which the kit calls a pool's methods: goroutines
// the pool starts there inherit it, so the kit can see whether they end.
const leakLabel = "gantry-adaptertest"

// fixture is one subtest's pool and what the kit knows about its workers.
type fixture struct {
	t    *testing.T
	h    Harness
	pool pool.Pool
	desc core.PoolInfo
	// elastic: the pool implements pool.Elastic, its nodes assign devices, so specs
	// carry GPUCount only and device indices are not checked.
	elastic bool
	rec     *Recorder
	token   string // unique to the fixture: prefixes worker ids, labels goroutines
	done    sync.Once

	mu       sync.Mutex
	n        int
	accepted map[string]bool // workers Start accepted
}

// setup makes a fresh pool for t; its cleanup stops every worker Start accepted, waits for
// their exits, and checks their events and the pool's goroutines.
func setup(t *testing.T, h Harness) *fixture {
	t.Helper()
	f := &fixture{
		t: t, h: h, rec: &Recorder{}, accepted: map[string]bool{},
		token: fmt.Sprintf("at%06x", rand.Uint32()&0xffffff),
	}
	f.pool = h.New(t)
	f.desc = f.pool.Describe()
	f.desc.CUDAVersions = slices.Clone(f.desc.CUDAVersions) // a copy no caller can change
	_, f.elastic = f.pool.(pool.Elastic)
	t.Cleanup(f.cleanup)
	return f
}

// cleanup runs finish once. It is registered again after each call of Harness.Spec, so that
// the workers stop before the cleanups Spec registered (a t.TempDir a worker writes to) run.
func (f *fixture) cleanup() { f.done.Do(f.finish) }

// exitWithin bounds the wait for the exit of a stopped worker: the grace, then force.
func (f *fixture) exitWithin() time.Duration { return f.h.StopGrace + f.h.Timeout }

// spec returns a spec from the harness for a worker that behaves as b, with a fresh id, the
// devices gpus and the fixture's recorder.
func (f *fixture) spec(b Behaviour, gpus []int) pool.WorkerSpec {
	f.t.Helper()
	s := f.h.Spec(f.t, b)
	f.t.Cleanup(f.cleanup)
	f.mu.Lock()
	f.n++
	s.ID = f.token + "-" + strconv.Itoa(f.n)
	f.mu.Unlock()
	s.Env = maps.Clone(s.Env)
	if s.Env == nil {
		s.Env = map[string]string{}
	}
	s.GPUs, s.GPUCount = slices.Clone(gpus), len(gpus)
	if f.elastic {
		s.GPUs = nil
	}
	s.Report = f.rec.Report
	return s
}

// devices returns the first k device indices on a GPU pool, none on a CPU pool.
func (f *fixture) devices(k int) []int {
	if f.desc.CPU {
		return nil
	}
	out := make([]int, k)
	for i := range out {
		out[i] = i
	}
	return out
}

// call runs fn (one of the pool's methods) under the fixture's profiler label, with a
// context that is cancelled as soon as fn returns: what a pool starts must not depend on it.
func (f *fixture) call(fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	pprof.Do(ctx, pprof.Labels(leakLabel, f.token), func(ctx context.Context) { err = fn(ctx) })
	return err
}

// start calls Start and remembers the worker when it is accepted. Safe from any goroutine.
func (f *fixture) start(spec pool.WorkerSpec) error {
	err := f.call(func(ctx context.Context) error { return f.pool.Start(ctx, spec) })
	if err == nil {
		f.mu.Lock()
		f.accepted[spec.ID] = true
		f.mu.Unlock()
	}
	return err
}

// mustStart starts a worker and waits for its WorkerRunning event.
func (f *fixture) mustStart(spec pool.WorkerSpec) {
	f.t.Helper()
	if err := f.start(spec); err != nil {
		f.t.Fatalf("Start(%s, image %q, GPUs %v) = %v; want nil", spec.ID, spec.Image, spec.GPUs, err)
	}
	f.rec.Wait(f.t, spec.ID, pool.WorkerRunning, f.h.Timeout)
}

func (f *fixture) stop(id string) error {
	return f.call(func(ctx context.Context) error { return f.pool.Stop(ctx, id) })
}

func (f *fixture) suspend(id string) error {
	return f.call(func(ctx context.Context) error { return f.pool.Suspend(ctx, id) })
}

func (f *fixture) resume(id string) error {
	return f.call(func(ctx context.Context) error { return f.pool.Resume(ctx, id) })
}

// mustStop stops a worker and returns its WorkerExited event, which must say it was stopped
// and carry no error.
func (f *fixture) mustStop(id string) pool.WorkerEvent {
	f.t.Helper()
	if err := f.stop(id); err != nil {
		f.t.Errorf("Stop(%s) = %v; want nil", id, err)
	}
	e := f.rec.Wait(f.t, id, pool.WorkerExited, f.exitWithin())
	if !e.Stopped || e.Err != nil {
		f.t.Errorf("worker %s exited after Stop with Stopped=%v, Err=%v; want Stopped=true, Err=nil%s", id, e.Stopped, e.Err, stopHint(e))
	}
	return e
}

// stopHint is a hint for a worker that exited by itself before Stop came.
func stopHint(e pool.WorkerEvent) string {
	if e.Stopped {
		return ""
	}
	return " (it exited by itself: does it outlive the context given to Start? Run cancels that context once Start returns)"
}

// probe polls Harness.Probe until the worker is ready and returns the environment it saw;
// ok is false when the harness has no Probe.
func (f *fixture) probe(spec pool.WorkerSpec) (env map[string]string, ok bool) {
	f.t.Helper()
	if f.h.Probe == nil {
		return nil, false
	}
	deadline := time.Now().Add(f.h.Timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if env, ok := f.h.Probe(f.t, spec); ok {
			return env, true
		}
		if evs := f.rec.Events(spec.ID); len(evs) > 0 && evs[len(evs)-1].State == pool.WorkerExited {
			f.t.Fatalf("worker %s exited before Probe saw it ready: %s", spec.ID, FormatEvents(evs))
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("worker %s: Probe did not see it ready within %v", spec.ID, f.h.Timeout)
		}
		<-tick.C
	}
}

// wantEvents fails the test unless worker id's events so far have exactly the states want.
func (f *fixture) wantEvents(id string, want ...pool.WorkerState) {
	f.t.Helper()
	got := f.rec.Events(id)
	states := make([]pool.WorkerState, len(got))
	for i, e := range got {
		states[i] = e.State
	}
	if !slices.Equal(states, want) {
		f.t.Errorf("worker %s events: %s; want exactly %v", id, FormatEvents(got), want)
	}
}

// finish stops the workers Start accepted, waits for their exits, then checks every event
// and that the goroutines the pool started under the fixture's label have ended.
func (f *fixture) finish() {
	t := f.t
	f.mu.Lock()
	accepted := maps.Clone(f.accepted)
	f.mu.Unlock()
	ids := slices.Sorted(maps.Keys(accepted))
	for _, id := range ids {
		if err := f.stop(id); err != nil {
			t.Errorf("Stop(%s) at cleanup = %v; want nil", id, err)
		}
	}
	for _, id := range ids {
		if _, err := f.rec.await(id, pool.WorkerExited, f.exitWithin()); err != nil {
			t.Error(err)
		}
	}
	for _, id := range ids {
		if bad := checkSequence(id, f.rec.Events(id), true); bad != "" {
			t.Errorf("worker %s: %s", id, bad)
		}
	}
	for _, e := range f.rec.Events("") {
		if !accepted[e.Worker] {
			t.Errorf("event %v for worker %q, which Start did not accept", e.State, e.Worker)
		}
	}
	f.checkNoLeak()
}

// checkNoLeak fails the test when goroutines the pool started under the fixture's label are
// still alive a while after the last worker exited.
func (f *fixture) checkNoLeak() {
	deadline := time.Now().Add(f.h.Timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		profile := labelled(f.t, f.token)
		if profile == "" {
			return
		}
		if time.Now().After(deadline) {
			f.t.Errorf("goroutines the pool started in its methods still run %v after its workers exited:\n%s", f.h.Timeout, profile)
			return
		}
		<-tick.C
	}
}

// labelled returns the entries of the goroutine profile labelled with the token, "" when
// there are none.
func labelled(t *testing.T, token string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	needle := strconv.Quote(leakLabel) + ":" + strconv.Quote(token)
	var found []string
	for _, entry := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(entry, needle) {
			found = append(found, entry)
		}
	}
	return strings.Join(found, "\n\n")
}
