package scheduler

import (
	"fmt"
	"time"

	"github.com/gantryhq/gantry/core"
)

// This file is an endpoint's health: workers failing in a row back further starts off, and
// the condition that /health and job status report.

// coldStats sums an endpoint's cold starts (worker start or resume to its first poll).
type coldStats struct {
	n           int64
	last, total time.Duration
}

// backingOff says that workers failed lately, or a pool refused a start lately, and the next
// start is not due yet.
func (s *Scheduler) backingOff(es *epState, now time.Time) bool {
	return (es.failures > 0 && now.Before(es.nextStart)) || now.Before(es.refusedUntil)
}

// RefusedRetry is how long an endpoint waits to ask again after a pool refused to start its
// worker for now (an error wrapping ErrNoCapacity): long enough not to spend a cloud API's
// rate limit on creates that fail.
const RefusedRetry = 10 * time.Second

// refuse records a start that a pool refused for now: not a failure (no crash-loop backoff,
// no unhealthy worker), but throttled, with the pool's reason, until a start succeeds or
// no start has been refused for two retry periods.
func (s *Scheduler) refuse(es *epState, now time.Time, pool string, err error) {
	es.refusal = fmt.Sprintf("pool %s: %v", pool, err)
	es.refusedUntil = now.Add(RefusedRetry)
	s.publish(es)
}

// fail records a worker that crashed or never became ready, and backs off further starts.
func (s *Scheduler) fail(es *epState, now time.Time, why string) {
	es.failures++
	es.failure = why
	d := s.cfg.BackoffMin << min(es.failures-1, 20)
	es.nextStart = now.Add(min(d, s.cfg.BackoffMax))
	s.cfg.Log.Warn("worker failed", "endpoint", es.ep.ID, "inARow", es.failures, "why", why, "nextStartIn", min(d, s.cfg.BackoffMax))
}

// publish hands the endpoint's condition to the job engine for /health and job status.
func (s *Scheduler) publish(es *epState) {
	waiting, why := 0, ""
	for _, w := range es.workers {
		if w.waiting != "" {
			waiting, why = waiting+1, w.waiting
		}
	}
	c := core.Condition{Throttled: es.throttled + waiting, Suspended: es.parked,
		ColdStarts: es.cold.n, ColdStartLast: es.cold.last, ColdStartTotal: es.cold.total}
	switch {
	case es.failures > 0:
		c.Unhealthy = min(es.failures, max(es.ep.Workers.Max, 1))
		c.Reason = fmt.Sprintf("workers keep failing before they take a job (%d in a row; last: %s); next start at %s",
			es.failures, es.failure, es.nextStart.UTC().Format(time.RFC3339))
	case es.throttled > 0 && es.noRoom != nil:
		if !es.noRoom.same(es.noRoomOf) { // the message is built when it changes
			es.noRoomMsg, es.noRoomOf = "waiting for capacity: "+es.noRoom.Error(), es.noRoom
		}
		c.Reason = es.noRoomMsg
	case es.refusal != "" && s.cfg.Clock.Now().Before(es.refusedUntil.Add(RefusedRetry)):
		c.Throttled = max(c.Throttled, 1)
		c.Reason = "waiting for capacity: " + es.refusal
	case waiting > 0:
		c.Reason = "waiting for capacity: " + why
	}
	if es.ep.Type == core.TypeLoadBalancer {
		es.lbCounts(&c)
	}
	if c != es.lastCond {
		es.lastCond = c
		es.load.SetCondition(c)
	}
}
