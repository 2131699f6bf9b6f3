package scheduler

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// Kill records the call and, unless slowKill is set, ends the worker as Stop does.
func (p *fakePool) Kill(ctx context.Context, id string) error {
	p.mu.Lock()
	p.killed = append(p.killed, id)
	slow := p.slowKill
	p.mu.Unlock()
	if slow {
		return nil
	}
	return p.Stop(ctx, id)
}

func (p *fakePool) kills() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.killed)
}

var _ pool.Killer = (*fakePool)(nil)

// A worker that goes silent while it holds a job (hung, or SIGSTOPped) is declared lost by the
// job engine: the scheduler kills it through its pool at once, it leaves /health's counts and
// the endpoint's active workers, and a replacement starts for its requeued job even on an
// endpoint with workers.max 1, before the hung worker has even exited.
func TestLostWorkerIsKilledAndReplaced(t *testing.T) {
	t.Parallel()
	for _, slow := range []bool{false, true} {
		r := setup(t)
		r.pool.slowKill = slow
		ep := r.endpoint(func(e *core.Endpoint) { e.Workers = core.Workers{Min: 0, Max: 1, IdleTimeout: 60} })
		job := r.submit(ep, 1, false)[0]
		hung := r.running(1)[0]
		r.poll()
		if got := r.take(ep, hung); got != job {
			t.Fatalf("slowKill %v: took %s; want %s", slow, got, job)
		}
		r.jobs.Tick(t.Context(), r.clock.Advance(core.WorkerLostAfter+time.Second))
		r.settle()
		if k := r.pool.kills(); !slices.Equal(k, []string{hung}) {
			t.Errorf("slowKill %v: killed %v; want [%s]", slow, k, hung)
		}
		if h := r.jobs.Health(t.Context(), ep.ID); h.Idle != 0 || h.Running != 0 || h.Initializing != 1 || h.InQueue != 1 {
			t.Errorf("slowKill %v: health after the loss = idle %d, running %d, initializing %d, inQueue %d; want 0, 0, 1, 1",
				slow, h.Idle, h.Running, h.Initializing, h.InQueue)
		}
		_, _, started := r.pool.counts()
		if started != 2 {
			t.Fatalf("slowKill %v: %d workers started; want 2 (the lost one and its replacement)", slow, started)
		}
		var fresh string
		for _, w := range r.s.EndpointWorkers(ep.ID) {
			switch {
			case w.ID == hung && w.Status != "STOPPING" && w.Status != "EXITED":
				t.Errorf("slowKill %v: lost worker listed %s; want STOPPING or EXITED", slow, w.Status)
			case w.ID != hung:
				fresh = w.ID
			}
		}
		r.tick(time.Second) // a tick changes nothing: no third worker
		if _, _, started := r.pool.counts(); started != 2 {
			t.Errorf("slowKill %v: %d workers started after a tick; want 2", slow, started)
		}
		r.poll()
		if got := r.take(ep, fresh); got != job {
			t.Errorf("slowKill %v: the replacement took %s; want %s", slow, got, job)
		}
		if slow {
			r.pool.exit(hung, nil)
			r.settle()
		}
		r.done(ep, fresh, job)
	}
}
