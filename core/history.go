package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// An endpoint's history is what its charts show from the moment a page opens: jobs ended per
// status, and their delay and execution times, per minute over the last 24 hours. Ended jobs
// are kept only for their retention (30 minutes, 1 for runsync), so the history cannot be
// derived from job records: each replica adds what ended on it to per-endpoint, per-minute
// counters in the shared store (HistoryStore), which every replica reads alike.
//
// Times are kept as histograms of fixed bins, not as samples: counters add up across minutes
// and replicas, and a percentile is estimated from the bins (linear within the bin that holds
// it, as Prometheus's histogram_quantile does).

// HistoryStep is the finest step of a history: one stored record per endpoint per minute.
const HistoryStep = time.Minute

// HistoryKeep is how long history records are kept; older ones are trimmed.
const HistoryKeep = 25 * time.Hour

// HistoryBounds are the upper bounds, in milliseconds, of the histogram bins of delay and
// execution times (1, 2, 5 steps); the last bin holds the times above the last bound.
var HistoryBounds = [HistoryBins - 1]int64{5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000,
	20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000, 5_000_000}

// HistoryBins is the number of bins in a history histogram.
const HistoryBins = 20

// HistoryCounts are what ended in one step: jobs by terminal status, and histograms of the
// delay (of jobs that were taken) and execution time (of jobs that ran), with their sums.
type HistoryCounts struct {
	Completed, Failed, TimedOut, Cancelled int64
	DelaySumMs, ExecSumMs                  int64
	Delay, Exec                            [HistoryBins]int64
}

// Add adds o's counts to c.
func (c *HistoryCounts) Add(o *HistoryCounts) {
	c.Completed += o.Completed
	c.Failed += o.Failed
	c.TimedOut += o.TimedOut
	c.Cancelled += o.Cancelled
	c.DelaySumMs += o.DelaySumMs
	c.ExecSumMs += o.ExecSumMs
	for i := range c.Delay {
		c.Delay[i] += o.Delay[i]
		c.Exec[i] += o.Exec[i]
	}
}

// Zero reports whether nothing is counted.
func (c *HistoryCounts) Zero() bool { return *c == HistoryCounts{} }

// historyBin is the bin of a time in milliseconds.
func historyBin(ms int64) int {
	i, _ := slices.BinarySearch(HistoryBounds[:], ms)
	return i // ms <= HistoryBounds[i], or HistoryBins-1 above them all
}

// HistoryRecord is one endpoint's counts of the minute that starts at At.
type HistoryRecord struct {
	Endpoint string
	At       time.Time // a whole minute (UTC)
	Counts   HistoryCounts
}

// HistoryStore keeps endpoints' per-minute history records, shared by every replica. A call
// whose ctx is done returns an error that wraps ctx.Err().
type HistoryStore interface {
	// AddHistory adds each record's counts to the stored record of its endpoint and minute
	// (one is created when there is none), all or none; they are durable on return. Adds
	// from several replicas at once all count.
	AddHistory(ctx context.Context, recs []HistoryRecord) error
	// ScanHistory returns the endpoint's records whose At is in [from, to), oldest first.
	ScanHistory(ctx context.Context, endpoint string, from, to time.Time) ([]HistoryRecord, error)
	// TrimHistory removes every endpoint's records whose At is before before.
	TrimHistory(ctx context.Context, before time.Time) error
}

// historyRecorder gathers the jobs that end on this replica into per-minute counts in
// memory, which Flush adds to the store (every second in the server): a job's end costs a
// map update under a lock, not a write. A crash loses what ended since the last flush.
type historyRecorder struct {
	store HistoryStore
	mu    sync.Mutex
	open  map[historyKey]*HistoryCounts
}

type historyKey struct {
	endpoint string
	at       int64 // unix minute
}

// record counts a job that reached its terminal status.
func (r *historyRecorder) record(j *Job) {
	if r == nil {
		return
	}
	at := j.EndedAt
	if at.IsZero() {
		return
	}
	k := historyKey{j.Endpoint, at.Unix() / 60}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open == nil {
		r.open = make(map[historyKey]*HistoryCounts)
	}
	c := r.open[k]
	if c == nil {
		c = new(HistoryCounts)
		r.open[k] = c
	}
	switch j.Status {
	case Completed:
		c.Completed++
	case Failed:
		c.Failed++
	case TimedOut:
		c.TimedOut++
	case Cancelled:
		c.Cancelled++
	}
	if !j.StartedAt.IsZero() {
		d := j.DelayTime(at)
		c.Delay[historyBin(d)]++
		c.DelaySumMs += d
		e := j.ExecutionTime(at)
		c.Exec[historyBin(e)]++
		c.ExecSumMs += e
	}
}

// flush adds the counts gathered so far to the store. On an error they are kept for the
// next flush.
func (r *historyRecorder) flush(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	open := r.open
	r.open = nil
	r.mu.Unlock()
	if len(open) == 0 {
		return nil
	}
	recs := make([]HistoryRecord, 0, len(open))
	for k, c := range open {
		recs = append(recs, HistoryRecord{Endpoint: k.endpoint, At: time.Unix(k.at*60, 0).UTC(), Counts: *c})
	}
	slices.SortFunc(recs, func(a, b HistoryRecord) int { // one lock order for every replica
		if a.Endpoint != b.Endpoint {
			if a.Endpoint < b.Endpoint {
				return -1
			}
			return 1
		}
		return a.At.Compare(b.At)
	})
	if err := r.store.AddHistory(ctx, recs); err != nil {
		r.mu.Lock()
		if r.open == nil {
			r.open = make(map[historyKey]*HistoryCounts)
		}
		for k, c := range open {
			if cur := r.open[k]; cur != nil {
				cur.Add(c)
			} else {
				r.open[k] = c
			}
		}
		r.mu.Unlock()
		return fmt.Errorf("storing the endpoints' history: %w", err)
	}
	return nil
}

// FlushHistory stores the history gathered since the last flush (a no-op without a
// HistoryStore). The server calls it every HistoryFlushEvery, and once after its workers stop.
func (js *Jobs) FlushHistory(ctx context.Context) error { return js.history.flush(ctx) }

// HistoryFlushEvery is how often the server stores the history it gathered: what a crash loses.
const HistoryFlushEvery = time.Second

// RunHistory flushes the history every HistoryFlushEvery, and trims records older than
// HistoryKeep every 10 minutes, until ctx ends; then it flushes once more.
func (js *Jobs) RunHistory(ctx context.Context) {
	if js.history == nil {
		return
	}
	t := time.NewTicker(HistoryFlushEvery)
	defer t.Stop()
	var trimmed time.Time
	for {
		select {
		case <-ctx.Done():
			// The last flush outlives ctx, which has ended: what ended before the stop is kept.
			if err := js.FlushHistory(context.WithoutCancel(ctx)); err != nil {
				js.log.Warn("storing history", "err", err)
			}
			return
		case <-t.C:
		}
		if err := js.FlushHistory(ctx); err != nil && ctx.Err() == nil {
			js.log.Warn("storing history", "err", err)
		}
		if now := js.clock.Now(); now.Sub(trimmed) >= 10*time.Minute {
			trimmed = now
			if err := js.history.store.TrimHistory(ctx, now.Add(-HistoryKeep)); err != nil && ctx.Err() == nil {
				js.log.Warn("trimming history", "err", err)
			}
		}
	}
}

// HistoryRange is a span of history and the step its buckets have.
type HistoryRange struct {
	Name string
	Span time.Duration
	Step time.Duration
}

// HistoryRanges are the ranges History answers: the last hour by minute, the last day by
// quarter hour.
var HistoryRanges = []HistoryRange{{"1h", time.Hour, time.Minute}, {"24h", 24 * time.Hour, 15 * time.Minute}}

// HistoryBucket is one step of a history. Percentiles are nil when no job of the step has a
// time to count.
type HistoryBucket struct {
	Start                                  time.Time
	Completed, Failed, TimedOut, Cancelled int64
	Delay, Exec                            HistoryTimes
}

// HistoryTimes are the figures of one kind of time in a bucket, in milliseconds.
type HistoryTimes struct {
	Count         int64
	Mean          float64
	P50, P90, P99 float64
}

// History is an endpoint's history over a range: every step of it, oldest first, empty ones
// included.
type History struct {
	Range   string
	Step    time.Duration
	Buckets []HistoryBucket
}

// ErrNoHistory says the server keeps no history (no HistoryStore).
var ErrNoHistory = errors.New("no history store")

// History returns the endpoint's history over the range named rng ("1h" or "24h"; "" = 1h),
// ending with the step that holds now. A bad range is a 422.
func (js *Jobs) History(ctx context.Context, endpoint, rng string) (History, error) {
	if rng == "" {
		rng = "1h"
	}
	i := slices.IndexFunc(HistoryRanges, func(r HistoryRange) bool { return r.Name == rng })
	if i < 0 {
		return History{}, Invalid(FieldError{"query.range", fmt.Sprintf("must be 1h or 24h, not %q", rng)})
	}
	if js.history == nil {
		return History{}, Internal("reading history", ErrNoHistory)
	}
	r := HistoryRanges[i]
	now := js.clock.Now().UTC()
	end := now.Truncate(r.Step).Add(r.Step)
	start := end.Add(-r.Span)
	h := History{Range: r.Name, Step: r.Step, Buckets: make([]HistoryBucket, r.Span/r.Step)}
	recs, err := js.history.store.ScanHistory(ctx, endpoint, start, end)
	if err != nil {
		return History{}, Internal("reading history", err)
	}
	// Counts gathered here and not yet flushed count too: a page opened just after a job
	// ended shows it.
	sums := make([]HistoryCounts, len(h.Buckets))
	add := func(at time.Time, c *HistoryCounts) {
		if at.Before(start) || !at.Before(end) {
			return
		}
		sums[at.Sub(start)/r.Step].Add(c)
	}
	for i := range recs {
		add(recs[i].At, &recs[i].Counts)
	}
	js.history.mu.Lock()
	for k, c := range js.history.open {
		if k.endpoint == endpoint {
			add(time.Unix(k.at*60, 0), c)
		}
	}
	js.history.mu.Unlock()
	for i := range h.Buckets {
		c := &sums[i]
		h.Buckets[i] = HistoryBucket{Start: start.Add(time.Duration(i) * r.Step),
			Completed: c.Completed, Failed: c.Failed, TimedOut: c.TimedOut, Cancelled: c.Cancelled,
			Delay: historyTimes(&c.Delay, c.DelaySumMs), Exec: historyTimes(&c.Exec, c.ExecSumMs)}
	}
	return h, nil
}

// historyTimes summarises a histogram.
func historyTimes(bins *[HistoryBins]int64, sum int64) HistoryTimes {
	var n int64
	for _, b := range bins {
		n += b
	}
	if n == 0 {
		return HistoryTimes{}
	}
	return HistoryTimes{Count: n, Mean: float64(sum) / float64(n),
		P50: HistoryQuantile(bins, 0.5), P90: HistoryQuantile(bins, 0.9), P99: HistoryQuantile(bins, 0.99)}
}

// HistoryQuantile estimates quantile q of a histogram, in milliseconds: linear within the bin
// that holds rank q, and the last bound for a rank in the open last bin.
func HistoryQuantile(bins *[HistoryBins]int64, q float64) float64 {
	var n int64
	for _, b := range bins {
		n += b
	}
	if n == 0 {
		return 0
	}
	rank := q * float64(n)
	var below int64
	lo := 0.0
	for i, b := range bins {
		if i == HistoryBins-1 {
			return lo
		}
		hi := float64(HistoryBounds[i])
		if float64(below+b) >= rank && b > 0 {
			return lo + (hi-lo)*(rank-float64(below))/float64(b)
		}
		below += b
		lo = hi
	}
	return lo
}
