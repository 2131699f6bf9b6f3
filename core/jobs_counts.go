package core

import (
	"context"
	"time"
)

// This file is the per-endpoint counters the engine keeps itself (the job states are counted
// by the store: JobStore.Stats) and the /health view built from both.

// counters is an endpoint's Counters and how to read the rest of its figures.
type counters struct {
	c      *Counters
	oldest func() time.Time  // a CountingStore's; nil when stats reads the figures
	stats  func() QueueStats // a store that keeps no Counters: its EndpointStats, or Stats
}

// countersOf returns the endpoint's counters: a CountingStore's own, or ones the engine keeps
// beside a store's Stats.
func (js *Jobs) countersOf(endpoint string) *counters {
	if c, ok := js.counts.Load(endpoint); ok {
		return c.(*counters)
	}
	c := &counters{}
	switch st := js.store.(type) {
	case CountingStore:
		c.c, c.oldest = st.Counters(endpoint)
	case EndpointStats:
		c.c, c.stats = new(Counters), st.EndpointStats(endpoint)
	default:
		c.c, c.stats = new(Counters), func() QueueStats { return js.stats(endpoint) }
	}
	v, _ := js.counts.LoadOrStore(endpoint, c)
	return v.(*counters)
}

// countsOf returns the endpoint's Counters.
func (js *Jobs) countsOf(endpoint string) *Counters { return js.countersOf(endpoint).c }

// stats returns the store's figures for the endpoint; zero, logged, when it cannot answer.
func (js *Jobs) stats(endpoint string) QueueStats {
	st, err := js.store.Stats(context.Background(), endpoint)
	if err != nil {
		js.log.Error("reading queue figures", "endpoint", endpoint, "err", err)
	}
	return st
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
	st := js.stats(endpoint)
	h := Health{InQueue: st.Queued, InProgress: st.InProgress, Completed: st.Completed, Failed: st.Failed,
		Retried: js.countsOf(endpoint).Retried.Load()}
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
