package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

func (p *fakePool) setPanic(call string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.panicIn = call
}

// An adapter that panics in Start fails that worker, as a Start error does: /health shows the
// panic, starts back off, and the server goes on. The worker it may have started before it
// panicked is stopped, and its exit is no second failure.
func TestAdapterPanicInStartFailsTheWorker(t *testing.T) {
	t.Parallel()
	r := setup(t)
	r.pool.setPanic("Start")
	ep := r.endpoint(nil) // workers.max 5: a second failure would show as 2 unhealthy
	job := r.submit(ep, 1, false)[0]
	if _, _, started := r.pool.counts(); started != 1 {
		t.Fatalf("%d starts; want 1", started)
	}
	if ids := r.pool.running(); len(ids) != 0 {
		t.Errorf("workers still running after Start panicked: %v; want it stopped", ids)
	}
	h := r.jobs.Health(t.Context(), ep.ID)
	if h.Unhealthy != 1 || !strings.Contains(h.Reason, "the adapter panicked in Start: boom in Start") {
		t.Errorf("health = unhealthy %d, reason %q; want 1, the panic", h.Unhealthy, h.Reason)
	}
	if n := r.jobs.RegisteredWorkers(); n != 0 {
		t.Errorf("the job engine knows %d workers; want 0 (forgotten)", n)
	}
	if free := r.s.Placer().Free("P"); free != 16 {
		t.Errorf("pool P has %d free slots; want all 16 back", free)
	}

	r.pool.setPanic("")
	r.tick(time.Second) // the backoff (1 s) has passed
	w := r.running(1)[0]
	r.poll()
	if got := r.take(ep, w); got != job {
		t.Errorf("the next worker took %s; want %s", got, job)
	}
	r.done(ep, w, job)
}

// An adapter that panics in Suspend has its worker stopped instead, as a Suspend error does.
func TestAdapterPanicInSuspendStopsTheWorker(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) {
		e.Workers = core.Workers{Min: 0, Max: 1, IdleTimeout: 1}
		e.Flashboot = core.FlashbootOn
	})
	job := r.submit(ep, 1, false)[0]
	w := r.running(1)[0]
	r.poll()
	r.take(ep, w)
	r.done(ep, w, job)
	r.pool.setPanic("Suspend")
	r.tick(2 * time.Second) // idle past its timeout: retired
	if alive, suspended, _ := r.pool.counts(); alive != 0 || suspended != 0 {
		t.Errorf("after Suspend panicked: %d alive, %d suspended; want the worker stopped", alive, suspended)
	}
	if ws := r.s.EndpointWorkers(ep.ID); len(ws) != 1 || ws[0].Status != "EXITED" {
		t.Errorf("workers = %+v; want %s EXITED", ws, w)
	}
}
