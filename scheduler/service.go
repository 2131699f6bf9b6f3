package scheduler

import (
	"cmp"
	"context"
	"time"
)

// This file is the scheduler as a long-running service (internal/startstop): Start runs the
// autoscaler on Config.Source until Stop, which then stops every worker. A scheduler that
// Follows is led by an elector instead: Start runs nothing, and the elector's Lead runs each
// term (LeadTerm); Stop still stops the workers once the elector has stopped.

// Start runs the autoscaler in a goroutine, as Run does, on Config.Source every Config.Tick,
// until ctx ends or Stop; for a scheduler that Follows it runs nothing (LeadTerm runs each
// term instead). ErrStarted when it runs already.
func (s *Scheduler) Start(ctx context.Context) error {
	if _, err := s.run.Begin(ctx); err != nil {
		return err
	}
	if !s.Following() {
		s.run.Go(func(ctx context.Context) { s.Run(ctx, s.cfg.Source, s.tickEvery(), s.resyncEvery()) })
	}
	return nil
}

// Stop ends what Start runs, waits for it, then stops every worker and waits for them (Close).
// With an elector, stop the elector first: its term's Lead must have returned.
func (s *Scheduler) Stop() {
	s.run.Stop()
	s.Close()
}

// LeadTerm runs the autoscaler for one term of leadership, until ctx ends: Lead on
// Config.Source, for an elector's Lead.
func (s *Scheduler) LeadTerm(ctx context.Context) {
	s.Lead(ctx, s.cfg.Source, s.tickEvery(), s.resyncEvery())
}

func (s *Scheduler) tickEvery() time.Duration   { return cmp.Or(s.cfg.Tick, time.Second) }
func (s *Scheduler) resyncEvery() time.Duration { return cmp.Or(s.cfg.Resync, 30*time.Second) }
