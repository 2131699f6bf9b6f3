package scheduler

import (
	"testing"
	"time"
)

// TestFollowerStartsNoWorkers: a replica that follows starts no worker for a job, at once or
// on a tick; once it leads, it does.
func TestFollowerStartsNoWorkers(t *testing.T) {
	t.Parallel()
	r := setup(t)
	r.s.Follow()
	ep := r.endpoint(nil)
	r.submit(ep, 1, false)
	r.s.Demand(ep.ID)
	r.tick(10 * time.Second)
	r.settle()
	r.running(0)
	if !r.s.Following() {
		t.Error("Following() = false after Follow; want true")
	}
	r.s.following.Store(false) // what Lead does for its term
	r.s.Demand(ep.ID)
	r.settle()
	r.running(1)
}
