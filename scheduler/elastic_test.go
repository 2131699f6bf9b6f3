package scheduler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// elasticPool is a fakePool whose capacity the test sets, as a cluster's would change.
type elasticPool struct {
	*fakePool
	capacity atomic.Int64
}

func (p *elasticPool) Capacity() int { return int(p.capacity.Load()) }

func TestElasticPoolPlacesByCountAndFollowsCapacity(t *testing.T) {
	t.Parallel()
	p := &elasticPool{fakePool: &fakePool{info: core.PoolInfo{ID: "K", GPUType: "H100", GPUs: 1, PerWorker: 8}}}
	p.capacity.Store(4)
	pl, err := NewPlacer([]pool.Pool{p})
	if err != nil {
		t.Fatal(err)
	}
	if got := pl.Total("K"); got != 4 {
		t.Fatalf("Total = %d; want the pool's Capacity, 4", got)
	}
	a, err := pl.Place(Want{Pools: []string{"K"}, Count: 3})
	if err != nil {
		t.Fatalf("Place(3 of 4) = %v", err)
	}
	if a.GPUs != nil || a.Count != 3 {
		t.Errorf("reservation GPUs %v, Count %d; want no indices and 3", a.GPUs, a.Count)
	}
	if _, err := pl.Place(Want{Pools: []string{"K"}, Count: 2}); err == nil || !strings.Contains(err.Error(), "3 of 4 in use") {
		t.Errorf("Place(2) with 1 free = %v; want \"3 of 4 in use\"", err)
	}
	p.capacity.Store(2) // nodes left: fewer than held
	if got := pl.Free("K"); got != 0 {
		t.Errorf("Free after the pool shrank below what is held = %d; want 0", got)
	}
	if _, err := pl.Place(Want{Pools: []string{"K"}, Count: 1}); err == nil || !strings.Contains(err.Error(), "3 of 2 in use") {
		t.Errorf("Place(1) on a shrunk pool = %v; want \"3 of 2 in use\"", err)
	}
	a.Release()
	p.capacity.Store(6)
	if got, total := pl.Free("K"), pl.Total("K"); got != 6 || total != 6 {
		t.Errorf("Free, Total after release and growth = %d, %d; want 6, 6", got, total)
	}
	b, err := pl.Place(Want{Pools: []string{"K"}, Count: 6})
	if err != nil {
		t.Fatalf("Place(6 of 6) = %v", err)
	}
	b.Release()
	b.Release() // harmless
	if got := pl.Free("K"); got != 6 {
		t.Errorf("Free after a double release = %d; want 6", got)
	}
}

// listingPool is a fakePool that also lists workers, some of which it was not asked to start.
type listingPool struct {
	*fakePool
	mu      sync.Mutex
	listed  []pool.LiveWorker
	stopped []string
}

func (p *listingPool) Stop(ctx context.Context, id string) error {
	p.mu.Lock()
	p.stopped = append(p.stopped, id)
	p.mu.Unlock()
	return p.fakePool.Stop(ctx, id)
}

func (p *listingPool) LiveWorkers(context.Context) ([]pool.LiveWorker, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.listed), nil
}

func TestRunReapsWorkersItDidNotStart(t *testing.T) {
	t.Parallel()
	lp := &listingPool{fakePool: &fakePool{info: core.PoolInfo{ID: "P", GPUType: "CPU", GPUs: 4, CPU: true}}}
	lp.listed = []pool.LiveWorker{{ID: "left-behind", Endpoint: "gone"}, {ID: "ours", Endpoint: "e", Known: true}}
	pl, err := NewPlacer([]pool.Pool{lp})
	if err != nil {
		t.Fatal(err)
	}
	s := &Scheduler{cfg: Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, placer: pl}
	s.reap(t.Context())
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if !slices.Equal(lp.stopped, []string{"left-behind"}) {
		t.Errorf("stopped %v; want only the worker the pool found, [left-behind]", lp.stopped)
	}
}

func TestWaitingWorkerIsThrottledNotFailing(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(nil)
	r.submit(ep, 1, false)
	r.running(1)
	r.pool.mu.Lock()
	spec := r.pool.started[0]
	r.pool.mu.Unlock()
	const why = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu"
	spec.Report(pool.WorkerEvent{Worker: spec.ID, State: pool.WorkerWaiting, Err: errors.New(why)})
	r.tick(2 * time.Minute) // past the init timeout: a waiting worker is not stopped for it
	r.running(1)
	if h := r.jobs.Health(t.Context(), ep.ID); h.Throttled != 1 || h.Unhealthy != 0 || !strings.Contains(h.Reason, why) {
		t.Errorf("health of a waiting worker = %+v; want throttled with the pool's reason, not unhealthy", h)
	}
	spec.Report(pool.WorkerEvent{Worker: spec.ID, State: pool.WorkerRunning})
	r.tick(30 * time.Second)
	if h := r.jobs.Health(t.Context(), ep.ID); h.Throttled != 0 || h.Unhealthy != 0 {
		t.Errorf("health once it runs = %+v; want neither throttled nor unhealthy", h)
	}
	r.tick(31 * time.Second) // the init timeout now counts from its start
	if h := r.jobs.Health(t.Context(), ep.ID); h.Unhealthy != 1 {
		t.Errorf("health a minute after its start without a poll = %+v; want unhealthy", h)
	}
}

// adoptingPool is an Elastic pool that lists the workers a previous run left and can adopt
// them.
type adoptingPool struct {
	*listingPool
	capacity int
	adopted  []string
	report   map[string]func(pool.WorkerEvent)
}

func (p *adoptingPool) Capacity() int { return p.capacity }

func (p *adoptingPool) Adopt(_ context.Context, w pool.LiveWorker, report func(pool.WorkerEvent)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.adopted = append(p.adopted, w.ID)
	p.report[w.ID] = report
	report(pool.WorkerEvent{Worker: w.ID, State: pool.WorkerRunning, At: time.Now()})
	return nil
}

type endpointList []core.Endpoint

func (l endpointList) ScanEndpoints(_ context.Context, fn func(core.Endpoint) error) error {
	for _, ep := range l {
		if err := fn(ep); err != nil {
			return err
		}
	}
	return nil
}

// TestRestartAdoptsWorkersThatStillMatch: after a restart, a worker found running for an
// endpoint that still wants it as it runs is adopted (kept, its capacity held, its exit seen);
// workers of an older revision, of a deleted endpoint, or beyond workers.max are stopped.
func TestRestartAdoptsWorkersThatStillMatch(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(ep *core.Endpoint) { ep.Workers.Max = 2; ep.GPU.Pools = []string{"K"} })
	rev := revision(ep)
	changed := *ep
	changed.Image = "gantry/echo:2"
	if revision(&changed) == rev {
		t.Fatal("an endpoint with another image has the same revision")
	}
	pl := &adoptingPool{listingPool: &listingPool{fakePool: &fakePool{info: core.PoolInfo{ID: "K", GPUType: "H100", GPUs: 1, PerWorker: 8}}},
		capacity: 8, report: map[string]func(pool.WorkerEvent){}}
	pl.listed = []pool.LiveWorker{
		{ID: "match1", Endpoint: ep.ID, Revision: rev, Count: 2},
		{ID: "stale", Endpoint: ep.ID, Revision: revision(&changed), Count: 1},
		{ID: "match2", Endpoint: ep.ID, Revision: rev, Count: 1},
		{ID: "over-max", Endpoint: ep.ID, Revision: rev, Count: 1},
		{ID: "orphan", Endpoint: "deleted-endpoint", Revision: rev, Count: 1},
	}
	s, err := New(Config{Jobs: r.jobs, Pools: []pool.Pool{pl}, BaseURL: "http://127.0.0.1:1", Clock: r.clock,
		Log: slog.New(slog.DiscardHandler), InitTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	s.syncAndReap(t.Context(), endpointList{*ep})
	pl.mu.Lock()
	adopted, stopped := slices.Clone(pl.adopted), slices.Clone(pl.stopped)
	report := pl.report["match1"]
	pl.mu.Unlock()
	if !slices.Equal(adopted, []string{"match1", "match2"}) {
		t.Errorf("adopted %v; want [match1 match2]", adopted)
	}
	slices.Sort(stopped)
	if !slices.Equal(stopped, []string{"orphan", "over-max", "stale"}) {
		t.Errorf("stopped %v; want [orphan over-max stale]", stopped)
	}
	if free := s.placer.Free("K"); free != 5 {
		t.Errorf("free capacity %d; want 8 - 3 held by the adopted workers", free)
	}
	es := s.state(ep.ID)
	es.mu.Lock()
	n := len(es.workers)
	es.mu.Unlock()
	if n != 2 {
		t.Errorf("the endpoint has %d workers; want the 2 adopted", n)
	}
	report(pool.WorkerEvent{Worker: "match1", State: pool.WorkerExited, At: time.Now(), Err: errors.New("pod OOMKilled")})
	if free := s.placer.Free("K"); free != 7 {
		t.Errorf("free capacity after an adopted worker exited %d; want 7", free)
	}
}
