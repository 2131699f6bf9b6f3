package scheduler

import (
	"context"
	"errors"
	"sync/atomic"
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
// no loop of its own; Stop still stops it. A loop scans its source first thing, and Stop
// waits for the goroutines Start launched, so an unscanned source after Stop means none ran.
func TestStartWhileFollowingRunsNothing(t *testing.T) {
	t.Parallel()
	r := setup(t)
	r.s.Follow()
	ep := r.endpoint(func(e *core.Endpoint) { e.Workers.Min = 1 })
	src := &scanCounter{EndpointSource: endpointList{*ep}}
	r.s.cfg.Source, r.s.cfg.Tick = src, time.Millisecond
	if err := r.s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.s.Stop()
	if n := src.scans.Load(); n != 0 {
		t.Errorf("a following scheduler's Start scanned its endpoints %d times; want no loop", n)
	}
	r.running(0)
}

// scanCounter counts the scans of an EndpointSource.
type scanCounter struct {
	EndpointSource
	scans atomic.Int32
}

func (c *scanCounter) ScanEndpoints(ctx context.Context, fn func(core.Endpoint) error) error {
	c.scans.Add(1)
	return c.EndpointSource.ScanEndpoints(ctx, fn)
}
