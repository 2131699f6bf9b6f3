package core

import (
	"context"
	"slices"
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
		// The autoscaler's reader has no context of its own (it reads every endpoint on every
		// tick); only a store that is neither counting nor shared gets here (test fakes).
		c.c, c.stats = new(Counters), func() QueueStats { return js.stats(context.Background(), endpoint) }
	}
	v, _ := js.counts.LoadOrStore(endpoint, c)
	return v.(*counters)
}

// countsOf returns the endpoint's Counters.
func (js *Jobs) countsOf(endpoint string) *Counters { return js.countersOf(endpoint).c }

// stats returns the store's figures for the endpoint; zero, logged, when it cannot answer.
func (js *Jobs) stats(ctx context.Context, endpoint string) QueueStats {
	st, err := js.store.Stats(ctx, endpoint)
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

// Health returns the endpoint's counts. With several replicas on a shared store, a replica
// that follows shows the worker figures the leader published (at most SharedRefresh old): the
// leader's scheduler runs the workers, and its engine hears of them from every replica.
func (js *Jobs) Health(ctx context.Context, endpoint string) Health {
	st := js.stats(ctx, endpoint)
	h := Health{InQueue: st.Queued, InProgress: st.InProgress, Completed: st.Completed, Failed: st.Failed,
		Retried: js.countsOf(endpoint).Retried.Load()}
	f, ok := js.sharedFigures(ctx, endpoint)
	if !ok {
		f = js.localFigures(endpoint)
	}
	h.Idle, h.Running, h.Initializing, h.Unhealthy = f.Idle, f.Running, f.Initializing, f.Unhealthy
	h.Throttled, h.Suspended, h.UnhealthyReasons, h.Reason = f.Throttled, f.Suspended, f.UnhealthyReasons, f.Reason
	h.ColdStarts, h.ColdStartLast, h.ColdStartTotal = f.ColdStarts, f.ColdStartLast, f.ColdStartTotal
	return h
}

// figuresOf starts an endpoint's worker figures from its scheduler's condition.
func figuresOf(cond Condition) WorkerFigures {
	return WorkerFigures{Throttled: cond.Throttled, Suspended: cond.Suspended, Unhealthy: cond.Unhealthy,
		Reason: cond.Reason, Idle: cond.Idle, Running: cond.Running, Initializing: cond.Initializing,
		ColdStarts: cond.ColdStarts, ColdStartLast: cond.ColdStartLast, ColdStartTotal: cond.ColdStartTotal}
}

// count adds a worker of the endpoint to its figures; its shard's lock is held.
func (f *WorkerFigures) count(w *workerState) {
	switch {
	case w.lost: // a lost worker is being stopped
	case w.unhealthy != "":
		f.Unhealthy++
		f.UnhealthyReasons = append(f.UnhealthyReasons, w.unhealthy)
	case w.suspended: // counted by the scheduler's condition
	case w.busy() > 0:
		f.Running++
	case !w.polled:
		f.Initializing++
	default:
		f.Idle++
	}
}

// localFigures returns the endpoint's worker figures as this replica sees them: its
// scheduler's condition and the workers it registered.
func (js *Jobs) localFigures(endpoint string) WorkerFigures {
	f := figuresOf(js.localCondition(endpoint))
	js.workers.each(func(w *workerState) {
		if w.endpoint == endpoint {
			f.count(w)
		}
	})
	slices.Sort(f.UnhealthyReasons)
	return f
}

// allLocalFigures returns localFigures for every endpoint with a condition or a worker.
func (js *Jobs) allLocalFigures() map[string]WorkerFigures {
	figs := map[string]WorkerFigures{}
	js.counts.Range(func(k, v any) bool {
		if c := v.(*counters).c.cond.Load(); c != nil {
			figs[k.(string)] = figuresOf(*c)
		}
		return true
	})
	js.workers.each(func(w *workerState) {
		f := figs[w.endpoint]
		f.count(w)
		figs[w.endpoint] = f
	})
	for ep, f := range figs {
		slices.Sort(f.UnhealthyReasons)
		figs[ep] = f
	}
	return figs
}
