package scheduler

import (
	"context"
	"fmt"
	"time"
)

// WaitStopped waits, after Close, until every worker's exit has been reported and applied:
// the scheduler has forgotten each worker, and the job engine too (which may write the jobs a
// worker held to the store). The store may close once it returns nil. It looks every
// millisecond or so; when ctx ends first it says how many workers are left.
func (s *Scheduler) WaitStopped(ctx context.Context) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		ours, engine := 0, s.cfg.Jobs.RegisteredWorkers()
		s.byID.Range(func(_, _ any) bool { ours++; return true })
		if ours == 0 && engine == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d workers have not exited (%d known to the job engine): %w", ours, engine, ctx.Err())
		case <-t.C:
		}
	}
}

// Hold starts no more workers (nor resumes suspended ones), for a graceful stop: the jobs still
// queued will not be handed out, and a worker starting now (a container pulling its image)
// would only delay Close, which waits for the pool calls in flight. Running workers go on.
func (s *Scheduler) Hold() { s.holding.Store(true) }
