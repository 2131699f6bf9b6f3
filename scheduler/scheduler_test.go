package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/store/memq"
	"github.com/gantryhq/gantry/store/pebble"
)

// rig is a scheduler over fake pools, with a real job engine on Pebble and an injected clock.
// Workers are played by the test: poll marks one ready, take and done run a job on it.
type rig struct {
	t     *testing.T
	clock *testkit.Clock
	jobs  *core.Jobs
	s     *Scheduler
	pool  *fakePool
}

func setup(t *testing.T, pools ...*fakePool) *rig {
	t.Helper()
	return setupWith(t, nil, pools...)
}

// setupWith is setup with mod applied to the scheduler's config before New (nil = none).
func setupWith(t *testing.T, mod func(*Config), pools ...*fakePool) *rig {
	t.Helper()
	if len(pools) == 0 {
		pools = []*fakePool{{info: core.PoolInfo{ID: "P", GPUType: "CPU", GPUs: 16, CPU: true}}}
	}
	st, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := &rig{t: t, clock: testkit.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), pool: pools[0]}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	js, err := st.Jobs(memq.Options{Clock: r.clock})
	if err != nil {
		t.Fatal(err)
	}
	r.jobs = core.NewJobs(core.JobsConfig{Store: js, Clock: r.clock, Log: log})
	var ps []pool.Pool
	for _, p := range pools {
		ps = append(ps, p)
	}
	cfg := Config{Jobs: r.jobs, Pools: ps, BaseURL: "http://127.0.0.1:1", Clock: r.clock, Log: log,
		InitTimeout: time.Minute, BackoffMin: time.Second, BackoffMax: 8 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	r.s, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.s.tickWaits = true // decisions, not lock avoidance (TestTickPassesABusyEndpointByAtMostTwice)
	t.Cleanup(r.s.Close)
	return r
}

// endpoint adds a QUEUE endpoint to the scheduler.
func (r *rig) endpoint(mod func(*core.Endpoint)) *core.Endpoint {
	ep := &core.Endpoint{ID: fmt.Sprint("ep", len(r.t.Name())), Owner: "alice", Type: core.TypeQueue, Container: core.Container{Image: "gantry/echo"},
		GPU: core.GPU{Pools: []string{"P"}, Count: 1}, Workers: core.Workers{Min: 0, Max: 5, IdleTimeout: 5},
		Scaling: core.Scaling{Type: core.ScaleQueueDelay, QueueDelay: 2}, Flashboot: core.FlashbootOff, TimeoutMs: 600000}
	if mod != nil {
		mod(ep)
	}
	r.s.Set(*ep)
	return ep
}

// settle applies the job engine's worker signals so far and waits for the scheduler's pool
// calls in flight.
func (r *rig) settle() {
	r.s.applySignals()
	r.s.wg.Wait()
}

// tick advances the clock by d and runs one autoscaler pass.
func (r *rig) tick(d time.Duration) {
	r.s.Tick(r.clock.Advance(d))
	r.settle()
}

func (r *rig) submit(ep *core.Endpoint, n int, low bool) []string {
	var ids []string
	for range n {
		j, err := r.jobs.Submit(r.t.Context(), ep, core.Submission{Input: []byte(`{}`), Policy: core.JobPolicy{LowPriority: low}})
		if err != nil {
			r.t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	r.settle()
	return ids
}

// poll plays each running worker's first job-take poll (it returns at once).
func (r *rig) poll() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, id := range r.pool.running() {
		r.jobs.Take(ctx, r.pool.alive[id].Endpoint, id, 1)
	}
	r.settle()
}

// take has a worker take one queued job.
func (r *rig) take(ep *core.Endpoint, worker string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	got := r.jobs.Take(ctx, ep.ID, worker, 1)
	if len(got) != 1 {
		r.t.Fatalf("worker %s took %d jobs; want 1", worker, len(got))
	}
	return got[0].ID
}

func (r *rig) done(ep *core.Endpoint, worker, id string) {
	if err := r.jobs.Done(r.t.Context(), ep.ID, worker, id, core.Result{Output: []byte(`1`)}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) running(want int) []string {
	r.t.Helper()
	ids := r.pool.running()
	if len(ids) != want {
		r.t.Fatalf("%d workers run; want %d", len(ids), want)
	}
	slices.Sort(ids)
	return ids
}

func TestScaleFromZeroAtOnce(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(nil)
	r.tick(time.Second)
	r.running(0)
	r.submit(ep, 1, false) // no tick: Demand starts it
	w := r.running(1)[0]
	if h := r.jobs.Health(t.Context(), ep.ID); h.Initializing != 1 {
		t.Errorf("health = %+v; want 1 initializing", h)
	}
	r.clock.Advance(120 * time.Millisecond)
	r.poll()
	h := r.jobs.Health(t.Context(), ep.ID)
	if h.ColdStarts != 1 || h.ColdStartLast != 120*time.Millisecond {
		t.Errorf("cold starts = %d, last %s; want 1, 120ms", h.ColdStarts, h.ColdStartLast)
	}
	id := r.take(ep, w)
	r.done(ep, w, id)
	r.submit(ep, 1, false)
	r.running(1) // a second job does not start a second worker
}

func TestLowPriorityDoesNotScaleUp(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(nil)
	r.submit(ep, 3, true)
	for range 5 {
		r.tick(time.Second)
	}
	r.running(0)
	r.submit(ep, 1, false)
	r.running(1)
}

func TestMinAndMax(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) { e.Workers = core.Workers{Min: 2, Max: 3, IdleTimeout: 5} })
	r.tick(time.Second)
	r.running(2) // workers.min with no job
	r.poll()
	r.submit(ep, 100, false)
	for range 10 {
		r.tick(time.Second)
		r.poll()
	}
	r.running(3) // workers.max
	for range 10 {
		r.tick(10 * time.Second) // idle, but busy: none retired
	}
	if n := len(r.pool.running()); n != 3 {
		t.Fatalf("%d workers after long idle ticks with jobs queued; want 3", n)
	}
}

func TestScaleUpOnRequestCount(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) {
		e.Scaling = core.Scaling{Type: core.ScaleRequestCount, RequestCount: 2}
		e.Workers = core.Workers{Min: 0, Max: 10}
	})
	r.submit(ep, 1, false) // scale from zero: 1
	r.poll()
	r.submit(ep, 8, false) // 9 jobs, 2 per worker: 5
	r.tick(time.Second)
	r.running(5)
	r.poll()
	r.tick(time.Second)
	r.running(5)
}

func TestScaleUpOnQueueDelay(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) { e.Scaling = core.Scaling{Type: core.ScaleQueueDelay, QueueDelay: 4} })
	r.submit(ep, 1, false)
	w := r.running(1)[0]
	r.poll()
	r.take(ep, w) // busy
	r.submit(ep, 1, false)
	r.tick(time.Second) // waited 1 s of 4; one job drains within 4 s (1 s assumed per job)
	r.tick(time.Second)
	r.running(1)
	r.tick(3 * time.Second) // waited 5 s > 4 s
	r.running(2)
}

func TestScaleUpOnPredictedDrain(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) { e.Scaling = core.Scaling{Type: core.ScaleQueueDelay, QueueDelay: 4} })
	r.submit(ep, 1, false)
	w := r.running(1)[0]
	r.poll()
	id := r.take(ep, w)
	r.clock.Advance(2 * time.Second)
	r.done(ep, w, id)       // service time 2 s
	r.submit(ep, 10, false) // 9 x 2 s on one worker: 18 s > 4 s, though nobody waited yet
	r.take(ep, w)
	r.tick(100 * time.Millisecond)
	if n := len(r.pool.running()); n < 4 {
		t.Errorf("%d workers; want at least 4 (to drain 10 jobs of 2 s within 4 s)", n)
	}
}

func TestPanicScalesUpOnlyAndOnBursts(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) {
		e.Scaling = core.Scaling{Type: core.ScaleRequestCount, RequestCount: 1}
		e.Workers = core.Workers{Min: 1, Max: 20}
	})
	for range StableWindow {
		r.tick(time.Second) // a quiet minute: the stable window holds zeros
	}
	r.poll()
	r.running(1)
	r.submit(ep, 12, false)
	r.tick(time.Second)
	// stable average 12/60 wants 1; the panic window (12/6 = 2) wants 2 = 2x ready: panic.
	r.running(2)
	r.poll()
	r.tick(time.Second) // panic average 24/6 = 4
	r.running(4)
	if !r.s.state(ep.ID).scaler.panicking {
		t.Fatal("not panicking after a 12x burst")
	}
	r.poll()
	r.jobs.Purge(t.Context(), ep.ID) // the burst vanishes: panic mode does not scale down
	for range 10 {
		r.tick(time.Minute / 10)
	}
	if n := len(r.pool.running()); n < 4 {
		t.Errorf("%d workers while panicking; want no scale-down", n)
	}
}

func TestScaleDownAfterIdle(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) { e.Workers = core.Workers{Min: 0, Max: 3, IdleTimeout: 5} })
	r.submit(ep, 1, false)
	w := r.running(1)[0]
	r.poll()
	id := r.take(ep, w)
	r.tick(10 * time.Second) // busy for 10 s: not idle
	r.done(ep, w, id)
	r.tick(4 * time.Second)
	r.running(1)
	// a new job resets the idle timer
	id2 := r.submit(ep, 1, false)[0]
	if got := r.take(ep, w); got != id2 {
		t.Fatalf("took %s; want %s", got, id2)
	}
	r.done(ep, w, id2)
	r.tick(4 * time.Second)
	r.running(1)
	r.tick(2 * time.Second)
	r.running(0)
	if alive, _, _ := r.pool.counts(); alive != 0 {
		t.Errorf("%d workers alive after scale-down with FLASHBOOT off; want 0", alive)
	}
}

func TestScaleDownNeverRetiresABusyWorker(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) {
		e.Workers = core.Workers{Min: 0, Max: 3, IdleTimeout: 1}
	})
	r.submit(ep, 1, false)
	w := r.running(1)[0]
	r.poll()
	r.take(ep, w)
	// Lower workers.max to 0 with a PATCH: the busy worker keeps its job.
	ep.Workers.Max = 0
	r.s.Set(*ep)
	for range 5 {
		r.tick(time.Minute)
	}
	r.running(1)
	st, _ := r.jobs.WorkerStatus(w)
	if st.Busy != 1 {
		t.Errorf("worker status = %+v; want it still busy", st)
	}
}

// TestScaleDownKeepsThePreferredPools: an endpoint that scaled out onto the pool it lists
// second retires the workers there first, though its worker on the pool it lists first has
// been idle longest: its workers.min worker stays where it prefers, and the second pool's
// capacity goes back to the endpoints that prefer it.
func TestScaleDownKeepsThePreferredPools(t *testing.T) {
	t.Parallel()
	first := &fakePool{info: core.PoolInfo{ID: "A", GPUType: "CPU", GPUs: 1, CPU: true}}
	second := &fakePool{info: core.PoolInfo{ID: "B", GPUType: "CPU", GPUs: 4, CPU: true}}
	r := setup(t, first, second)
	ep := r.endpoint(func(e *core.Endpoint) {
		e.GPU.Pools = []string{"A", "B"}
		e.Workers = core.Workers{Min: 1, Max: 3, IdleTimeout: 5}
		e.Scaling = core.Scaling{Type: core.ScaleRequestCount, RequestCount: 1}
	})
	r.tick(time.Second) // workers.min: one worker, on A
	a := r.running(1)[0]
	r.submit(ep, 3, false)
	for range 5 { // two more, on B (A is full)
		if len(second.running()) == 2 {
			break
		}
		r.tick(time.Second)
	}
	bs := second.running()
	if len(bs) != 2 {
		t.Fatalf("%d workers on B; want 2", len(bs))
	}
	ja := r.take(ep, a)
	jobs := map[string]string{}
	for _, b := range bs {
		jobs[b] = r.take(ep, b)
	}
	r.done(ep, a, ja) // A's worker is idle first, and so longest
	r.tick(2 * time.Second)
	for _, b := range bs {
		r.done(ep, b, jobs[b])
	}
	for range 100 { // past the panic and stable windows
		r.tick(10 * time.Second)
	}
	if got := first.running(); len(got) != 1 || got[0] != a {
		t.Errorf("workers on A = %v; want %s kept", got, a)
	}
	if got := second.running(); len(got) != 0 {
		t.Errorf("workers on B = %v; want them retired first", got)
	}
}

func TestIdleWorkerTakingAJobIsNotRetired(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) { e.Workers = core.Workers{Min: 0, Max: 3, IdleTimeout: 1} })
	r.submit(ep, 1, false)
	w := r.running(1)[0]
	r.poll()
	id := r.take(ep, w)
	r.done(ep, w, id)
	r.clock.Advance(2 * time.Second)
	// The worker takes a job just as it is retired: SuspendWorker refuses, it stays.
	r.submit(ep, 1, false)
	r.take(ep, w)
	if r.jobs.SuspendWorker(t.Context(), w) {
		t.Fatal("SuspendWorker of a busy worker = true")
	}
	r.tick(time.Second)
	r.running(1)
}

func TestPatchTakesEffectLive(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) { e.Workers = core.Workers{Min: 1, Max: 3, IdleTimeout: 5} })
	r.tick(time.Second)
	r.running(1)
	ep.Workers.Min = 3
	r.s.Set(*ep)
	r.tick(time.Second)
	r.running(3)
	r.poll()
	ep.Workers = core.Workers{Min: 0, Max: 1, IdleTimeout: 5}
	r.s.Set(*ep)
	r.tick(time.Second) // over workers.max: idle ones go at once
	r.running(1)
	old := r.running(1)[0]
	ep.Image = "gantry/other"
	r.s.Set(*ep)
	r.tick(time.Second) // an idle worker with the old image is replaced
	if ids := r.pool.running(); slices.Contains(ids, old) {
		t.Errorf("worker %s with the old image still runs", old)
	}
}

func TestCrashLoopBacksOffAndShowsUnhealthy(t *testing.T) {
	t.Parallel()
	pl := &fakePool{info: core.PoolInfo{ID: "P", GPUs: 4, CPU: true}, crash: errors.New("exit status 3")}
	r := setup(t, pl)
	ep := r.endpoint(nil)
	ids := r.submit(ep, 1, false)
	_, _, started := pl.counts()
	if started != 1 {
		t.Fatalf("started %d; want 1", started)
	}
	h := r.jobs.Health(t.Context(), ep.ID)
	if h.Unhealthy != 1 || !strings.Contains(h.Reason, "exit status 3") {
		t.Errorf("health = %+v; want 1 unhealthy with the exit status as reason", h)
	}
	j, _ := r.jobs.Get(t.Context(), core.JobRef{Endpoint: ep.ID, ID: ids[0]}, 0)
	if !strings.Contains(j.Reason, "exit status 3") {
		t.Errorf("queued job reason = %q; want the crash", j.Reason)
	}
	// backoff: 1 s, then 2 s, 4 s, 8 s (the max)
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second} {
		r.tick(wait - 100*time.Millisecond)
		if _, _, n := pl.counts(); n != i+1 {
			t.Fatalf("crash %d: %d starts before the backoff of %s passed; want %d", i+1, n, wait, i+1)
		}
		r.tick(100 * time.Millisecond)
		if _, _, n := pl.counts(); n != i+2 {
			t.Fatalf("crash %d: %d starts after the backoff of %s; want %d", i+1, n, wait, i+2)
		}
	}
	// the workers are fixed: the next one polls, the endpoint is healthy again
	pl.mu.Lock()
	pl.crash = nil
	pl.mu.Unlock()
	r.tick(8 * time.Second)
	r.poll()
	r.tick(time.Second)
	if h := r.jobs.Health(t.Context(), ep.ID); h.Unhealthy != 0 || h.Reason != "" {
		t.Errorf("health after recovery = %+v; want healthy", h)
	}
}

func TestInitTimeout(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(nil)
	r.submit(ep, 1, false)
	r.running(1)
	r.tick(59 * time.Second)
	r.running(1)
	r.tick(2 * time.Second) // never polled within a minute
	if alive, _, _ := r.pool.counts(); alive != 0 {
		t.Fatalf("%d workers alive after the init timeout; want 0", alive)
	}
	if h := r.jobs.Health(t.Context(), ep.ID); h.Unhealthy != 1 || !strings.Contains(h.Reason, "did not poll") {
		t.Errorf("health = %+v; want unhealthy, reason the init timeout", h)
	}
}

// A worker that polled is ready at the next tick even when the engine's ready signal has not
// been applied (under load the goroutine applying signals waits for a CPU): the tick reads the
// engine's activity mirror, and the cold start ends at the poll, not at the tick.
func TestPolledWorkerReadyWithoutItsSignal(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) { e.Workers = core.Workers{Min: 1, Max: 3, IdleTimeout: 5} })
	r.tick(time.Second)
	w := r.running(1)[0]
	r.clock.Advance(2 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.jobs.Take(ctx, ep.ID, w, 1) // its first poll, at +2 s
	r.s.signals.Take(nil)         // the signal is late: not applied before the tick
	r.tick(5 * time.Second)
	if h := r.jobs.Health(t.Context(), ep.ID); h.ColdStarts != 1 || h.ColdStartLast != 2*time.Second {
		t.Fatalf("health = %+v; want the worker ready, its cold start 2s (to its poll)", h)
	}
	r.running(1)
}

// A worker stopped while its pool is still starting it (here: timed out before a slow Start
// returned) is stopped once Start returns. A Stop sent earlier reached a pool that did not
// know the worker yet, so the worker ran on, holding its capacity, with no one to stop it:
// the scheduler simulation's endpoint that waited for capacity until its drain limit. The
// bubble (synctest) lets the test wait until every call the tick made has run before Start
// returns, which is the order that lost the worker.
func TestStopDuringStartStopsTheWorker(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pl := &fakePool{info: core.PoolInfo{ID: "P", GPUType: "CPU", GPUs: 16, CPU: true},
			startGate: make(chan struct{}), startIn: make(chan string, 1)}
		r := setup(t, pl)
		ep := r.endpoint(nil)
		if _, err := r.jobs.Submit(t.Context(), ep, core.Submission{Input: []byte(`{}`)}); err != nil { // Demand starts a worker
			t.Fatal(err)
		}
		id := <-pl.startIn
		r.s.Tick(r.clock.Advance(2 * time.Minute)) // past the init timeout: the tick stops it
		if es := r.s.state(ep.ID); es.active.Load() != 0 {
			t.Fatalf("%d workers active after the init timeout; want 0", es.active.Load())
		}
		synctest.Wait()     // what the tick started has run
		close(pl.startGate) // now Start returns
		r.settle()
		if alive, _, _ := pl.counts(); alive != 0 {
			t.Errorf("%d workers alive after their stop; want 0", alive)
		}
		if free := r.s.Placer().Free("P"); free != 16 {
			t.Errorf("%d of 16 slots free after the worker's stop; want all", free)
		}
		if _, ok := r.s.byID.Load(id); ok {
			t.Errorf("worker %s is still known to the scheduler after its exit", id)
		}
	})
}

func TestThrottledWhenNoPoolHasRoom(t *testing.T) {
	t.Parallel()
	pl := &fakePool{info: core.PoolInfo{ID: "P", GPUs: 2}}
	r := setup(t, pl)
	ep := r.endpoint(func(e *core.Endpoint) {
		e.Scaling = core.Scaling{Type: core.ScaleRequestCount, RequestCount: 1}
		e.Workers = core.Workers{Max: 4}
		e.GPU.Count = 1
	})
	r.submit(ep, 4, false)
	r.tick(time.Second)
	r.running(2)
	h := r.jobs.Health(t.Context(), ep.ID)
	if h.Throttled != 1 || !strings.Contains(h.Reason, "P: 2 of 2 in use") {
		t.Errorf("health = %+v; want throttled with the pool's reason", h)
	}
}

// TestThrottledWhenThePoolRefuses: a start the pool refuses for now (ErrNoCapacity: a cloud
// with no machine, a cost cap) shows as throttled with the pool's reason, not as failing, and
// is asked again after RefusedRetry.
func TestThrottledWhenThePoolRefuses(t *testing.T) {
	t.Parallel()
	pl := &fakePool{info: core.PoolInfo{ID: "P", GPUs: 2}, refuse: fmt.Errorf("throttled: the cost guard allows 1 pod: %w", pool.ErrNoCapacity)}
	r := setup(t, pl)
	ep := r.endpoint(nil)
	r.submit(ep, 1, false)
	testkit.Eventually(t, "the refusal published", func() bool { return r.jobs.Health(t.Context(), ep.ID).Throttled == 1 })
	if h := r.jobs.Health(t.Context(), ep.ID); h.Unhealthy != 0 || !strings.Contains(h.Reason, "waiting for capacity: pool P: throttled: the cost guard allows 1 pod") {
		t.Errorf("health = %+v; want throttled with the pool's reason, none unhealthy", h)
	}
	r.tick(RefusedRetry - time.Second)
	if n := r.pool.startCalls(); n != 1 {
		t.Errorf("%d starts before RefusedRetry passed; want 1", n)
	}
	pl.mu.Lock()
	pl.refuse = nil
	pl.mu.Unlock()
	r.tick(time.Second)
	r.running(1)
	r.poll()
	r.tick(time.Second)
	if h := r.jobs.Health(t.Context(), ep.ID); h.Throttled != 0 || h.Reason != "" {
		t.Errorf("health after a start succeeded = %+v; want no longer throttled", h)
	}
}

func TestFlashbootSuspendsAndResumes(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) { e.Flashboot = core.FlashbootOn })
	r.submit(ep, 1, false)
	w := r.running(1)[0]
	r.poll()
	r.done(ep, w, r.take(ep, w))
	r.tick(6 * time.Second) // idle past the 5 s timeout: suspended, not stopped
	alive, suspended, _ := r.pool.counts()
	if alive != 1 || suspended != 1 {
		t.Fatalf("alive %d, suspended %d; want 1, 1", alive, suspended)
	}
	if h := r.jobs.Health(t.Context(), ep.ID); h.Suspended != 1 || h.Idle != 0 {
		t.Errorf("health = %+v; want 1 suspended, 0 idle", h)
	}
	r.clock.Advance(time.Hour)
	r.submit(ep, 1, false) // Demand resumes it
	if _, _, started := r.pool.counts(); started != 1 || r.pool.resumes != 1 {
		t.Fatalf("started %d, resumed %d; want the suspended worker resumed", started, r.pool.resumes)
	}
	r.clock.Advance(3 * time.Millisecond)
	r.poll()
	h := r.jobs.Health(t.Context(), ep.ID)
	if h.ColdStarts != 2 || h.ColdStartLast != 3*time.Millisecond {
		t.Errorf("cold starts %d, last %s; want 2, 3ms (the resume)", h.ColdStarts, h.ColdStartLast)
	}
	r.take(ep, w)
}

func TestSuspendedWorkersAreReclaimedFlashbootFirst(t *testing.T) {
	t.Parallel()
	pl := &fakePool{info: core.PoolInfo{ID: "P", GPUs: 2}}
	r := setup(t, pl)
	mk := func(id string, fb core.Flashboot) *core.Endpoint {
		return r.endpoint(func(e *core.Endpoint) { e.ID, e.Flashboot = id, fb })
	}
	pri, plain := mk("pri", core.FlashbootPriority), mk("plain", core.FlashbootOn)
	for _, ep := range []*core.Endpoint{pri, plain} {
		r.submit(ep, 1, false)
		r.poll()
		w := slices.IndexFunc(pl.started, func(s pool.WorkerSpec) bool { return s.Endpoint == ep.ID })
		r.done(ep, pl.started[w].ID, r.take(ep, pl.started[w].ID))
	}
	r.tick(6 * time.Second) // both idle: suspended, holding both GPUs
	if _, s, _ := pl.counts(); s != 2 {
		t.Fatalf("%d suspended; want 2", s)
	}
	third := mk("third", core.FlashbootOff)
	r.submit(third, 1, false) // no room: reclaims the plain FLASHBOOT worker
	alive, suspended, _ := pl.counts()
	if alive != 1 || suspended != 1 {
		t.Fatalf("alive %d, suspended %d after a reclaim; want 1, 1", alive, suspended)
	}
	if h := r.jobs.Health(t.Context(), plain.ID); h.Suspended != 0 {
		t.Errorf("plain FLASHBOOT endpoint keeps %d suspended; want its worker reclaimed first", h.Suspended)
	}
	r.tick(time.Second) // the freed GPU is used
	if h := r.jobs.Health(t.Context(), third.ID); h.Initializing != 1 {
		t.Errorf("third endpoint health = %+v; want a worker starting", h)
	}
}

func TestDeletedEndpointStopsItsWorkers(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) { e.Workers.Min = 2 })
	r.tick(time.Second)
	r.running(2)
	r.s.Remove(ep.ID)
	r.settle()
	if alive, _, _ := r.pool.counts(); alive != 0 {
		t.Errorf("%d workers alive after delete; want 0", alive)
	}
	if free := r.s.Placer().Free("P"); free != 16 {
		t.Errorf("%d free in the pool; want 16", free)
	}
}

func TestWorkerEnvAndGPUs(t *testing.T) {
	t.Parallel()
	pl := &fakePool{info: core.PoolInfo{ID: "G", GPUType: "NVIDIA L4", GPUs: 4, DataCenter: "DC-1"}}
	r := setup(t, pl)
	reg := "reg-1"
	ep := r.endpoint(func(e *core.Endpoint) {
		e.GPU = core.GPU{Pools: []string{"G"}, Count: 2}
		e.Env = map[string]string{"MODEL": "x"}
		e.Registry = &reg
	})
	r.submit(ep, 1, false)
	spec := pl.started[0]
	if !slices.Equal(spec.GPUs, []int{0, 1}) || spec.Registry != "reg-1" || spec.Env["RUNPOD_GPU_COUNT"] != "2" || spec.Env["MODEL"] != "x" ||
		!strings.HasSuffix(spec.Env["RUNPOD_WEBHOOK_GET_JOB"], "/job-take/"+spec.ID+"?gpu=NVIDIA+L4") {
		t.Errorf("spec = %+v; want GPUs [0 1], the endpoint's env and worker URLs with a query", spec)
	}
}

// TestWorkerEnvGantryWins: an endpoint's env cannot replace the worker-protocol variables
// Gantry sets (the worker's token, its URLs, its ids): they stay Gantry's.
func TestWorkerEnvGantryWins(t *testing.T) {
	t.Parallel()
	pl := &fakePool{info: core.PoolInfo{ID: "G", GPUType: "NVIDIA L4", GPUs: 4, DataCenter: "DC-1"}}
	r := setup(t, pl)
	forged := map[string]string{}
	for _, k := range []string{"RUNPOD_WEBHOOK_GET_JOB", "RUNPOD_WEBHOOK_POST_OUTPUT", "RUNPOD_WEBHOOK_POST_STREAM", "RUNPOD_WEBHOOK_PING",
		"RUNPOD_POD_ID", "RUNPOD_AI_API_KEY", "RUNPOD_ENDPOINT_ID", "RUNPOD_GPU_COUNT", "RUNPOD_PING_INTERVAL"} {
		forged[k] = "forged"
	}
	ep := r.endpoint(func(e *core.Endpoint) { e.GPU = core.GPU{Pools: []string{"G"}, Count: 1}; e.Env = forged })
	r.submit(ep, 1, false)
	spec := pl.started[0]
	for k := range forged {
		if spec.Env[k] == "forged" || spec.Env[k] == "" {
			t.Errorf("worker env %s = %q; want Gantry's value over the endpoint's", k, spec.Env[k])
		}
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	// A pool id that %q escapes as Go does ("\t"), where Prometheus keeps a tab as it is.
	r := setup(t, &fakePool{info: core.PoolInfo{ID: "P\té", GPUType: "CPU", GPUs: 16, CPU: true}})
	ep := r.endpoint(func(e *core.Endpoint) { e.GPU.Pools = []string{"P\té"} })
	r.submit(ep, 1, false)
	r.poll()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(r.s.Collector())
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("GatherAndLint = %v, %v; want no problems", problems, err)
	}
	b, err := testutil.CollectAndFormat(r.s.Collector(), expfmt.TypeTextPlain,
		"gantry_scaling_decisions_total", "gantry_cold_start_seconds", "gantry_workers", "gantry_pool_gpus")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf(`gantry_scaling_decisions_total{direction="up",endpoint=%q,reason="scale_from_zero"} 1`, ep.ID),
		fmt.Sprintf(`gantry_cold_start_seconds_count{endpoint=%q,mode="start"} 1`, ep.ID),
		fmt.Sprintf(`gantry_workers{endpoint=%q,state="ready"} 1`, ep.ID),
		"gantry_pool_gpus{pool=\"P\té\",state=\"free\"} 15", // the tab as it is
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s:\n%s", want, b)
		}
	}
	// A follower sends no worker or pool series: the leader's are the real ones.
	r.s.Follow()
	if n, err := testutil.GatherAndCount(reg, "gantry_workers", "gantry_pool_gpus"); err != nil || n != 0 {
		t.Errorf("a follower's worker and pool series = %d, %v; want none", n, err)
	}
	if n, _ := testutil.GatherAndCount(reg, "gantry_queue_jobs"); n == 0 {
		t.Error("a follower sends no queue series; want them (they come from the store)")
	}
}

func TestWorkersAndLogs(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) { e.Workers.Min = 2 })
	r.tick(time.Second)
	ids := r.running(2)
	r.clock.Advance(40 * time.Millisecond)
	r.poll()
	r.submit(ep, 1, false)
	r.take(ep, ids[0])
	got := map[string]string{}
	for _, w := range r.s.EndpointWorkers(ep.ID) {
		got[w.ID] = w.Status
		if w.Pool != "P" || len(w.GPUs) != 1 || w.ColdStart != 40*time.Millisecond {
			t.Errorf("worker %+v; want pool P, one slot, a 40ms cold start", w)
		}
	}
	if got[ids[0]] != "RUNNING" || got[ids[1]] != "IDLE" {
		t.Errorf("statuses = %v; want %s RUNNING, %s IDLE", got, ids[0], ids[1])
	}
	r.pool.Stop(context.Background(), ids[1]) // exits
	ws := r.s.EndpointWorkers(ep.ID)
	if last := ws[len(ws)-1]; last.ID != ids[1] || last.Status != "EXITED" || last.ExitedAt.IsZero() {
		t.Errorf("last worker = %+v; want %s EXITED", last, ids[1])
	}
	if _, err := r.s.WorkerLogs(context.Background(), ep.ID, ids[1], 10); core.KindOf(err) != core.KindUnavailable {
		t.Errorf("WorkerLogs on a pool without logs = %v; want KindUnavailable", err)
	}
	if _, err := r.s.WorkerLogs(context.Background(), ep.ID, "nope", 10); core.KindOf(err) != core.KindNotFound {
		t.Errorf("WorkerLogs of an unknown worker = %v; want KindNotFound", err)
	}
}

// A tick passes by an endpoint whose lock another goroutine holds (it may be waiting for a
// CPU), but only maxBusyTicks times in a row: the next tick waits for the lock.
func TestTickPassesABusyEndpointByAtMostTwice(t *testing.T) {
	t.Parallel()
	r := setup(t)
	r.s.tickWaits = false
	r.endpoint(func(e *core.Endpoint) { e.Workers = core.Workers{Min: 1, Max: 3, IdleTimeout: 5} })
	v, _ := r.s.eps.Load(fmt.Sprint("ep", len(t.Name())))
	es := v.(*epState)
	es.mu.Lock()
	for range maxBusyTicks {
		r.tick(time.Second) // returns although the lock is held
	}
	r.running(0) // workers.min was not applied: the endpoint was passed by
	done := make(chan struct{})
	go func() { r.tick(time.Second); close(done) }()
	es.mu.Unlock()
	<-done
	r.running(1) // the third tick waited for the lock and did the endpoint's work
	if n := es.busyTicks.Load(); n != 0 {
		t.Errorf("busyTicks = %d after a tick that got the lock; want 0", n)
	}
}

// exit makes a running worker exit on its own, as a crash does.
func (p *fakePool) exit(id string, err error) {
	p.mu.Lock()
	spec, ok := p.alive[id]
	delete(p.alive, id)
	p.mu.Unlock()
	if ok {
		spec.Report(pool.WorkerEvent{Worker: id, State: pool.WorkerExited, At: time.Now(), Err: err})
	}
}

// A quiet endpoint (nothing queued, running or new; its workers idle) is passed by until its
// first idle worker is due to retire, and ticked in full again as soon as a worker exits or
// the endpoint changes.
func TestQuietEndpointsArePassedBy(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) { e.Workers = core.Workers{Min: 1, Max: 3, IdleTimeout: 5} })
	v, _ := r.s.eps.Load(ep.ID)
	es := v.(*epState)
	skipped := func() int { es.mu.Lock(); defer es.mu.Unlock(); return es.scaler.skipped }

	r.tick(time.Second) // starts workers.min
	w := r.running(1)[0]
	r.poll()
	r.tick(time.Second) // a full pass: the endpoint is quiet
	for i := range 3 {
		r.tick(time.Second)
		if n := skipped(); n != i+1 {
			t.Fatalf("after %d quiet ticks %d were passed by; want all", i+1, n)
		}
	}

	r.pool.exit(w, errors.New("out of memory"))
	r.settle()
	r.tick(time.Second) // not passed by: the worker that exited is replaced at once
	if ids := r.running(1); ids[0] == w {
		t.Fatalf("worker %s still counted after it exited", w)
	}
	r.poll()

	r.tick(time.Second) // quiet again
	r.tick(time.Second)
	if n := skipped(); n != 1 {
		t.Fatalf("%d ticks passed by once quiet again; want 1", n)
	}
	// PATCH to workers.max 0: the next tick is a full one (the skipped ticks' samples are
	// caught up) and retires the idle worker at once.
	ep.Workers = core.Workers{Min: 0, Max: 0, IdleTimeout: 5}
	r.s.Set(*ep)
	r.tick(time.Second)
	r.running(0)
	if n := skipped(); n != 0 {
		t.Errorf("the tick after a PATCH was passed by (%d skipped)", n)
	}
}

// catchUp owes the windows a zero sample and the panic clock a tick for every skipped tick;
// it must end where that many single ticks would, however many were skipped.
func TestCatchUpEqualsSkippedTicks(t *testing.T) {
	t.Parallel()
	for _, skipped := range []int{1, 3, 5, 6, 7, 59, 60, 61, 1000} {
		for _, panicking := range []bool{false, true} {
			fast, slow := newScaler(60, 6), newScaler(60, 6)
			for i := range 70 { // windows full of distinct samples, the ring's start not at 0
				for _, s := range []*scaler{&fast, &slow} {
					s.stable.add(float64(i + 1))
					s.panic.add(float64(i + 1))
					s.updatePanic(panicking && i == 60)
				}
			}
			fast.skipped = skipped
			fast.catchUp()
			for range skipped {
				slow.stable.add(0)
				slow.panic.add(0)
				slow.updatePanic(false)
			}
			for _, s := range []*scaler{&fast, &slow} { // the windows' contents, oldest first
				s.stable.add(7)
				s.panic.add(7)
			}
			if fast.stable.avg() != slow.stable.avg() || fast.panic.avg() != slow.panic.avg() ||
				fast.stable.filled != slow.stable.filled || fast.panicking != slow.panicking || fast.skipped != 0 {
				t.Errorf("skipped %d, panicking %v: caught up to stable %v (%d), panic %v, panicking %v; ticks give %v (%d), %v, %v",
					skipped, panicking, fast.stable.avg(), fast.stable.filled, fast.panic.avg(), fast.panicking,
					slow.stable.avg(), slow.stable.filled, slow.panic.avg(), slow.panicking)
			}
			for range 60 { // and every later sample leaves the same average
				fast.stable.add(1)
				slow.stable.add(1)
				if fast.stable.avg() != slow.stable.avg() {
					t.Fatalf("skipped %d: windows diverge after catching up", skipped)
				}
			}
		}
	}
}

// A worker whose job asked for stopPod (runpod's refresh_worker) right after one of its jobs
// was cancelled is retired at the next tick: the cancelled job it may still be running until
// its next ping does not keep it in service (issue 29, item 14).
func TestStopPodAfterACancelRetiresAtOnce(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) { e.Workers = core.Workers{Min: 1, Max: 1, IdleTimeout: 60} })
	r.tick(time.Second)
	w := r.running(1)[0]
	r.poll()
	r.tick(time.Second)
	ids := r.submit(ep, 2, false)
	if got := r.take(ep, w); got != ids[0] {
		t.Fatalf("took %s; want %s", got, ids[0])
	}
	if _, err := r.jobs.Cancel(t.Context(), core.JobRef{Endpoint: ep.ID, ID: ids[0]}); err != nil {
		t.Fatal(err)
	}
	if got := r.take(ep, w); got != ids[1] {
		t.Fatalf("took %s; want %s", got, ids[1])
	}
	if err := r.jobs.Done(t.Context(), ep.ID, w, ids[1], core.Result{Output: []byte(`1`), StopPod: true}); err != nil {
		t.Fatal(err)
	}
	r.tick(time.Second)
	if slices.Contains(r.pool.running(), w) {
		t.Errorf("worker %s still runs after its job asked for stopPod; want it retired", w)
	}
}

// A worker's spec carries its endpoint's allowedCudaVersions, for pools that rent machines
// (RunPod) to ask for them (issue 29, item 18).
func TestWorkerSpecCarriesCUDAVersions(t *testing.T) {
	t.Parallel()
	r := setup(t, &fakePool{info: core.PoolInfo{ID: "P", GPUType: "L4", GPUs: 4, CUDAVersions: []string{"12.2", "12.4"}}})
	r.endpoint(func(e *core.Endpoint) {
		e.AllowedCudaVersions = []string{"12.4", "12.8"}
		e.Workers = core.Workers{Min: 1, Max: 1, IdleTimeout: 5}
	})
	r.tick(time.Second)
	r.running(1)
	if got := r.pool.started[0].CUDAVersions; !slices.Equal(got, []string{"12.4", "12.8"}) {
		t.Errorf("the spec's CUDA versions = %v; want the endpoint's [12.4 12.8]", got)
	}
}
