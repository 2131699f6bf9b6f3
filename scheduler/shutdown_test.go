package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// TestWaitStopped: WaitStopped waits while a worker is alive (the scheduler or the job engine
// still knows it), says how many are left when its context ends, and returns nil once every
// worker's exit has been applied.
func TestWaitStopped(t *testing.T) {
	t.Parallel()
	r := setup(t)
	r.endpoint(func(ep *core.Endpoint) { ep.Workers.Min = 2 })
	r.tick(time.Second)
	r.running(2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := r.s.WaitStopped(ctx); err == nil || !strings.Contains(err.Error(), "2 workers have not exited (2 known to the job engine)") {
		t.Errorf("WaitStopped with 2 workers alive = %v; want an error saying 2 have not exited", err)
	}
	r.s.Close() // the fake pool reports each exit from Stop
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.s.WaitStopped(ctx); err != nil {
		t.Errorf("WaitStopped after Close = %v; want nil", err)
	}
	if n := r.jobs.RegisteredWorkers(); n != 0 {
		t.Errorf("the job engine knows %d workers after WaitStopped; want 0", n)
	}
}

// TestHold: once held, the scheduler starts no worker, neither for a queued job on an endpoint
// scaled to zero (Demand) nor at a tick; the workers running go on.
func TestHold(t *testing.T) {
	t.Parallel()
	r := setup(t)
	busy := r.endpoint(func(ep *core.Endpoint) { ep.ID, ep.Workers.Min = "busy", 1 })
	r.tick(time.Second)
	r.running(1)
	r.s.Hold()
	idle := r.endpoint(func(ep *core.Endpoint) { ep.ID = "idle" })
	r.submit(idle, 2, false)
	r.submit(busy, 3, false)
	r.tick(time.Second)
	r.tick(10 * time.Second)
	if _, _, started := r.pool.counts(); started != 1 {
		t.Errorf("%d workers started in all; want 1 (the one before Hold)", started)
	}
	r.running(1)
}
