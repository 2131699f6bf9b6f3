package core

import (
	"sync/atomic"
	"time"
)

// This file is the per-endpoint job counters and the /health view built from them.

// endpointCounts are an endpoint's job counters, moved by count on every state change.
type endpointCounts struct {
	// First, together, the counts LoadCounter.Load reads on every autoscaler tick.
	inQueue, lowQueued, inProgress atomic.Int64 // lowQueued: lowPriority jobs among inQueue
	submitted                      atomic.Int64 // jobs ever submitted or requeued
	execMs, execCount              atomic.Int64 // execution time of ended jobs
	completed, failed, retried     atomic.Int64
	cond                           atomic.Pointer[Condition]
}

func (js *Jobs) countsOf(endpoint string) *endpointCounts {
	if c, ok := js.counts.Load(endpoint); ok {
		return c.(*endpointCounts)
	}
	c, _ := js.counts.LoadOrStore(endpoint, &endpointCounts{})
	return c.(*endpointCounts)
}

// count moves a job between the per-endpoint counters when its state changes; low is the
// job's policy.lowPriority.
func (js *Jobs) count(endpoint string, from, to JobStatus, low bool) {
	if from == to {
		return
	}
	c := js.countsOf(endpoint)
	c.add(from, -1, low)
	c.add(to, +1, low)
	if to == InQueue {
		c.submitted.Add(1)
	}
}

func (c *endpointCounts) add(s JobStatus, d int64, low bool) {
	switch s {
	case InQueue:
		c.inQueue.Add(d)
		if low {
			c.lowQueued.Add(d)
		}
	case InProgress:
		c.inProgress.Add(d)
	case Completed:
		c.completed.Add(d)
	case Failed, TimedOut:
		c.failed.Add(d)
	}
}

// Health is an endpoint's job and worker counts (spec 2.10).
type Health struct {
	InQueue, InProgress, Completed, Failed, Retried int64
	Idle, Running, Initializing, Unhealthy          int
	Throttled, Suspended                            int
	// UnhealthyReasons are the reasons unhealthy workers gave, for operators.
	UnhealthyReasons []string
	// Reason says why queued jobs wait when something is wrong (crash loop, no capacity).
	Reason string
	// ColdStarts counts workers started or resumed for the endpoint; the durations run from
	// the decision to the worker's first poll.
	ColdStarts                    int64
	ColdStartLast, ColdStartTotal time.Duration
}

// Health returns the endpoint's counts.
func (js *Jobs) Health(endpoint string) Health {
	c := js.countsOf(endpoint)
	h := Health{InQueue: c.inQueue.Load(), InProgress: c.inProgress.Load(), Completed: c.completed.Load(),
		Failed: c.failed.Load(), Retried: c.retried.Load()}
	cond := js.condition(endpoint)
	h.Throttled, h.Suspended, h.Unhealthy, h.Reason = cond.Throttled, cond.Suspended, cond.Unhealthy, cond.Reason
	h.Idle, h.Running, h.Initializing = cond.Idle, cond.Running, cond.Initializing
	h.ColdStarts, h.ColdStartLast, h.ColdStartTotal = cond.ColdStarts, cond.ColdStartLast, cond.ColdStartTotal
	js.wmu.Lock()
	defer js.wmu.Unlock()
	for _, w := range js.workers {
		switch {
		case w.endpoint != endpoint, w.lost: // a lost worker is being stopped
		case w.unhealthy != "":
			h.Unhealthy++
			h.UnhealthyReasons = append(h.UnhealthyReasons, w.unhealthy)
		case w.suspended: // counted by the scheduler's condition
		case w.busy() > 0:
			h.Running++
		case !w.polled:
			h.Initializing++
		default:
			h.Idle++
		}
	}
	return h
}
