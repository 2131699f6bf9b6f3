package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// The job engine's ready signal ends a cold start without waiting for a tick, and the cold
// start lasts until the poll, not until the scheduler applied the signal.
func TestReadySignalEndsAColdStartWithoutATick(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(nil)
	r.submit(ep, 1, false) // Demand starts a worker
	w := r.running(1)[0]
	r.clock.Advance(250 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.jobs.Take(ctx, ep.ID, w, 1) // its first poll; no settle, no tick
	r.clock.Advance(time.Second)  // the signal may be applied after this: it carries its time
	deadline := time.Now().Add(5 * time.Second)
	for r.jobs.Health(t.Context(), ep.ID).ColdStarts == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if h := r.jobs.Health(t.Context(), ep.ID); h.ColdStarts != 1 || h.ColdStartLast != 250*time.Millisecond {
		t.Errorf("cold starts = %d, last %s; want 1, 250ms", h.ColdStarts, h.ColdStartLast)
	}
}

// A worker that took a job before the scheduler applied its ready signal (a poll racing a tick)
// is ready and busy to that tick, not a booting worker to stop: here a PATCH lowered
// workers.max to 0, which stops booting workers at once.
func TestBusyWorkerWhoseReadySignalIsInFlightIsNotStopped(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) { e.Workers = core.Workers{Min: 0, Max: 3, IdleTimeout: 1} })
	job := r.submit(ep, 1, false)[0]
	w := r.running(1)[0]
	r.s.sigMu.Lock() // as if watchWorkers had taken the signal and not applied it yet
	if got := r.take(ep, w); got != job {
		t.Fatalf("took %s; want %s", got, job)
	}
	inFlight := r.s.signals.Take(nil)
	r.s.sigMu.Unlock()
	if len(inFlight) != 1 || inFlight[0].Kind != core.WorkerReady {
		t.Fatalf("signals = %v; want one ready", inFlight)
	}
	ep.Workers.Max = 0
	r.s.Set(*ep)
	r.tick(time.Second)
	r.running(1)
	if st, _ := r.jobs.WorkerStatus(w); st.Busy != 1 {
		t.Errorf("worker status = %+v; want it still busy", st)
	}
	if ws := r.s.EndpointWorkers(ep.ID); len(ws) != 1 || ws[0].Status != "RUNNING" {
		t.Errorf("workers = %+v; want %s RUNNING", ws, w)
	}
}
