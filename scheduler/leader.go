package scheduler

import (
	"context"
	"time"
)

// With several replicas on one store, one leads (leader.Elector): it alone runs the autoscaler,
// placement and the pool adapters. The others follow: their schedulers tick nothing and start
// no workers, while their APIs serve every call.

// Follow makes the scheduler a follower's: it starts and resumes no workers (Demand and ticks
// do nothing) until Lead. Call it before Start when a leader is to be elected.
func (s *Scheduler) Follow() { s.following.Store(true) }

// Lead runs the autoscaler for one term of leadership, until ctx ends: as Run does, it first
// syncs the endpoints from src and adopts or stops the workers its pools list but it did not
// start (reap: the previous leader's; the stopped ones' jobs go back to the queue by the
// worker-lost rule), then ticks every interval and resyncs every resync. When ctx ends
// (the term is lost or the server stops) it follows again and returns; unlike Run it does not
// stop the workers, so that a server stopping closes them itself (Close) and a deposed leader
// leaves them to the next one.
func (s *Scheduler) Lead(ctx context.Context, src EndpointSource, interval, resync time.Duration) {
	s.following.Store(false)
	defer s.following.Store(true)
	s.useSource(src)
	s.syncAndReap(ctx, src)
	s.loop(ctx, src, interval, resync)
}

// Following reports whether another replica leads (Follow, outside a Lead).
func (s *Scheduler) Following() bool { return s.following.Load() }
