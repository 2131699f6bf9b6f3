package scheduler

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
)

// lbWorkers are fake LOAD_BALANCER workers whose health the test sets.
type lbWorkers struct {
	mu     sync.Mutex
	health map[string]int // worker id -> code its health check answers; 0 = 200
}

func (l *lbWorkers) set(id string, code int) { l.mu.Lock(); l.health[id] = code; l.mu.Unlock() }

func (l *lbWorkers) handler(id string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		code := l.health[id]
		l.mu.Unlock()
		if code == 0 {
			code = 200
		}
		w.WriteHeader(code)
	})
}

func lbSetup(t *testing.T) (*rig, *lbWorkers, *core.Endpoint) {
	t.Helper()
	ws := &lbWorkers{health: map[string]int{}}
	pool := &fakePool{info: core.PoolInfo{ID: "P", GPUType: "CPU", GPUs: 8, CPU: true}, http: ws.handler}
	r := setup(t, pool)
	ep := r.endpoint(func(e *core.Endpoint) {
		e.Type = core.TypeLoadBalancer
		e.Scaling = core.Scaling{Type: core.ScaleRequestCount, RequestCount: 1}
		e.Workers = core.Workers{Min: 0, Max: 4, IdleTimeout: 5}
		e.Env = map[string]string{"PORT": "8000"}
	})
	return r, ws, ep
}

func TestLBScaleFromZeroHoldsTheRequest(t *testing.T) {
	t.Parallel()
	r, _, ep := lbSetup(t)
	base, release, err := r.s.Acquire(context.Background(), ep.ID, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	spec := r.pool.started[0]
	if spec.PortEnv["PORT"] != 8000 || spec.PortEnv["PORT_HEALTH"] != 8000 || spec.Env["HEALTH_CHECK_PATH"] != "/ping" ||
		spec.Env["RUNPOD_WEBHOOK_GET_JOB"] != "" {
		t.Errorf("spec = %+v; want ports 8000 and /ping from the env, no job protocol", spec)
	}
	if base == nil || base.Host == "" {
		t.Fatalf("Acquire = %v; want the worker's address", base)
	}
	if h := r.jobs.Health(t.Context(), ep.ID); h.ColdStarts != 1 {
		t.Errorf("cold starts = %d; want 1", h.ColdStarts)
	}
}

func TestLBHoldTimesOut(t *testing.T) {
	t.Parallel()
	r, ws, ep := lbSetup(t)
	ws.set("", 0)
	// Every worker answers 204 (initializing) forever.
	r.pool.http = func(id string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) })
	}
	waited := make(chan error)
	go func() {
		_, _, err := r.s.Acquire(context.Background(), ep.ID, 300*time.Millisecond)
		waited <- err
	}()
	testkit.Eventually(t, "a worker starting", func() bool { _, _, n := r.pool.counts(); return n == 1 })
	r.tick(100 * time.Millisecond) // a request waits: the starting worker is wanted
	if err := <-waited; core.KindOf(err) != core.KindUnavailable {
		t.Fatalf("Acquire with no ready worker = %v; want KindUnavailable", err)
	}
	if h := r.jobs.Health(t.Context(), ep.ID); h.Initializing != 1 {
		t.Errorf("health = %+v; want the worker initializing", h)
	}
	// Nobody waits any more: once the wait leaves the stable window, the starting worker is
	// not needed.
	for range StableWindow {
		r.tick(time.Second)
	}
	if alive, _, started := r.pool.counts(); alive != 0 || started != 1 {
		t.Errorf("alive %d, started %d; want the one started worker retired", alive, started)
	}
}

func TestLBLeastInFlightAndHealth(t *testing.T) {
	t.Parallel()
	r, ws, ep := lbSetup(t)
	ep.Workers.Min = 2
	r.s.Set(*ep)
	r.tick(time.Second)
	es := r.s.state(ep.ID)
	testkit.Eventually(t, "two workers ready", func() bool { p := es.lb.Load(); return p != nil && len(*p) == 2 })
	// least in flight: with one request held on a worker, the next two go to the other, then back
	a, relA, _ := r.s.Acquire(context.Background(), ep.ID, time.Second)
	b, relB, _ := r.s.Acquire(context.Background(), ep.ID, time.Second)
	if a.Host == b.Host {
		t.Errorf("two requests on the same worker %s while another is idle", a.Host)
	}
	relA()
	c, relC, _ := r.s.Acquire(context.Background(), ep.ID, time.Second)
	if c.Host != a.Host {
		t.Errorf("third request on %s; want the idle worker %s", c.Host, a.Host)
	}
	relB()
	relC()
	// a worker failing its health check leaves the rotation
	bad := r.pool.started[0].ID
	ws.set(bad, 500)
	testkit.Eventually(t, "one worker out of rotation", func() bool { p := es.lb.Load(); return len(*p) == 1 })
	r.tick(time.Second)
	if h := r.jobs.Health(t.Context(), ep.ID); h.Unhealthy != 1 || h.Idle != 1 {
		t.Errorf("health = %+v; want 1 unhealthy, 1 idle", h)
	}
	for range 5 {
		u, rel, _ := r.s.Acquire(context.Background(), ep.ID, time.Second)
		if u.Host == r.pool.srvs[bad].Listener.Addr().String() {
			t.Error("a request went to the unhealthy worker")
		}
		rel()
	}
	ws.set(bad, 0) // healthy again
	testkit.Eventually(t, "back in rotation", func() bool { p := es.lb.Load(); return len(*p) == 2 })
}

func TestLBScaleUpOnInFlightAndDownAfterIdle(t *testing.T) {
	t.Parallel()
	r, _, ep := lbSetup(t)
	var releases []func()
	_, rel, err := r.s.Acquire(context.Background(), ep.ID, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	releases = append(releases, rel)
	for range 2 {
		_, rel, _ := r.s.Acquire(context.Background(), ep.ID, time.Second)
		releases = append(releases, rel)
	}
	r.tick(time.Second) // 3 in flight, 1 per worker
	if _, _, started := r.pool.counts(); started != 3 {
		t.Fatalf("started %d workers for 3 requests in flight; want 3", started)
	}
	for _, rel := range releases {
		rel()
	}
	es := r.s.state(ep.ID)
	testkit.Eventually(t, "three ready", func() bool { p := es.lb.Load(); return len(*p) == 3 })
	for range StableWindow + 1 { // the bursts leave the windows; idle 5 s passes
		r.tick(time.Second)
	}
	if alive, _, _ := r.pool.counts(); alive != 0 {
		t.Errorf("%d workers alive after a minute idle; want 0 (workers.min 0)", alive)
	}
}

// getter is an endpoint source that reads single endpoints.
type getter struct{ eps map[string]core.Endpoint }

func (g getter) ScanEndpoints(_ context.Context, fn func(core.Endpoint) error) error {
	for _, ep := range g.eps {
		if err := fn(ep); err != nil {
			return err
		}
	}
	return nil
}

func (g getter) GetEndpoint(_ context.Context, id string) (core.Endpoint, error) {
	ep, ok := g.eps[id]
	if !ok {
		return core.Endpoint{}, core.ErrNotFound
	}
	return ep, nil
}

// lbEndpoint is a LOAD_BALANCER endpoint the scheduler has not been told of (created through
// another replica a moment ago).
func lbEndpoint(id string) core.Endpoint {
	return core.Endpoint{ID: id, Owner: "alice", Type: core.TypeLoadBalancer,
		Container: core.Container{Image: "gantry/http-echo", Env: map[string]string{"PORT": "8000"}},
		GPU:       core.GPU{Pools: []string{"P"}, Count: 1}, Workers: core.Workers{Min: 0, Max: 2, IdleTimeout: 5},
		Scaling: core.Scaling{Type: core.ScaleRequestCount, RequestCount: 1}, Flashboot: core.FlashbootOff}
}

// A request for a LOAD_BALANCER endpoint the leader's scheduler has not heard of yet (created
// on another replica, the change still on its way) is not answered 503: the scheduler reads
// the endpoint from its source, or waits for the change, and serves it (issue 29, item 16).
func TestLBAcquireLearnsANewEndpoint(t *testing.T) {
	t.Parallel()
	t.Run("read from the source", func(t *testing.T) {
		t.Parallel()
		r, _, _ := lbSetup(t)
		ep := lbEndpoint("ep-new")
		r.s.useSource(getter{eps: map[string]core.Endpoint{ep.ID: ep}})
		base, release, err := r.s.Acquire(context.Background(), ep.ID, 10*time.Second)
		if err != nil {
			t.Fatalf("Acquire of an endpoint the source has = %v; want a worker", err)
		}
		release()
		if base == nil || base.Host == "" {
			t.Errorf("Acquire = %v; want the worker's address", base)
		}
	})
	t.Run("the change arrives", func(t *testing.T) {
		t.Parallel()
		r, _, _ := lbSetup(t) // no source read single endpoints
		ep := lbEndpoint("ep-late")
		got := make(chan error, 1)
		go func() {
			_, release, err := r.s.Acquire(context.Background(), ep.ID, 10*time.Second)
			if release != nil {
				release()
			}
			got <- err
		}()
		testkit.Eventually(t, "Acquire to wait for the endpoint", func() bool {
			r.s.learn.mu.Lock()
			defer r.s.learn.mu.Unlock()
			return r.s.learn.setCh != nil
		})
		r.s.Set(ep)
		if err := <-got; err != nil {
			t.Errorf("Acquire while the endpoint's change arrives = %v; want a worker", err)
		}
	})
	t.Run("never known", func(t *testing.T) {
		t.Parallel()
		r, _, _ := lbSetup(t)
		r.s.useSource(getter{eps: map[string]core.Endpoint{}})
		start := time.Now()
		_, _, err := r.s.Acquire(context.Background(), "ep-gone", 200*time.Millisecond)
		if core.KindOf(err) != core.KindUnavailable || !strings.Contains(err.Error(), "ep-gone is not known to the scheduler yet") {
			t.Errorf("Acquire of an unknown endpoint = %v; want 503 saying it is not known yet", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Acquire of an unknown endpoint took %s; want at most about its hold", d)
		}
	})
}
