package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/startstop"
	"github.com/gantryhq/gantry/internal/testkit"
)

// TestStartRunsTheAutoscalerAndStopStopsIt: Start reads Config.Source and ticks (an endpoint
// with workers.min 1 gets its worker), refuses a second start, and Stop returns with every
// worker stopped.
func TestStartRunsTheAutoscalerAndStopStopsIt(t *testing.T) {
	t.Parallel()
	r := setup(t)
	ep := r.endpoint(func(e *core.Endpoint) { e.Workers.Min = 1 })
	r.s.cfg.Source, r.s.cfg.Tick = endpointList{*ep}, 5*time.Millisecond
	if err := r.s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Start(context.Background()); !errors.Is(err, startstop.ErrStarted) {
		t.Errorf("second Start: %v; want ErrStarted", err)
	}
	testkit.Eventually(t, "the endpoint's minimum worker", func() bool { return len(r.pool.running()) == 1 })
	r.s.Stop()
	r.running(0)
}

// TestStartWhileFollowingRunsNothing: a scheduler that follows (an elector leads it) starts
// no loop of its own; Stop still stops it.
func TestStartWhileFollowingRunsNothing(t *testing.T) {
	t.Parallel()
	r := setup(t)
	r.s.Follow()
	ep := r.endpoint(func(e *core.Endpoint) { e.Workers.Min = 1 })
	r.s.cfg.Source, r.s.cfg.Tick = endpointList{*ep}, time.Millisecond
	if err := r.s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // many ticks, had a loop run
	r.running(0)
	r.s.Stop()
}
