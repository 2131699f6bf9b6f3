package core

import (
	"context"
	"io"
	"time"
)

// This file is what the scheduler reads from and tells the job engine about an endpoint's
// workers: their activity, suspension (FLASHBOOT), and the condition /health reports.

// WorkerStatus is a worker's activity as the job engine sees it.
type WorkerStatus struct {
	Polled    bool      // it has polled for a job since it started or resumed
	Busy      int       // jobs it holds
	IdleSince time.Time // when it last held no job; zero before its first poll
	StopPod   bool      // its last job asked for the worker to be recycled
	Unhealthy string    // the reason it reported itself unhealthy; "" = healthy
}

// WorkerStatus returns a registered worker's activity.
func (js *Jobs) WorkerStatus(worker string) (WorkerStatus, bool) {
	sh, w := js.workers.lock(worker)
	defer sh.mu.Unlock()
	if w == nil {
		return WorkerStatus{}, false
	}
	return WorkerStatus{Polled: w.polled, Busy: w.busy(), IdleSince: w.idleSince, StopPod: w.stopPod,
		Unhealthy: w.unhealthy}, true
}

// WorkerActivity reads one worker's activity without the engine's lock: the scheduler reads
// every worker's on every tick.
type WorkerActivity struct{ w *workerState }

// Activity returns a registered worker's activity reader.
func (js *Jobs) Activity(worker string) (WorkerActivity, bool) {
	sh, w := js.workers.lock(worker)
	defer sh.mu.Unlock()
	return WorkerActivity{w}, w != nil
}

// Started reports whether the worker polled since it started or resumed, and whether it holds
// a job: two atomic loads, for a look at every booting worker on every tick.
func (a WorkerActivity) Started() (polled, busy bool) {
	if a.w == nil {
		return false, false
	}
	return a.w.aPolled.Load(), a.w.aBusy.Load() > 0
}

// Status returns the worker's activity as of its last change (Unhealthy is not mirrored:
// read WorkerStatus for it).
func (a WorkerActivity) Status() WorkerStatus {
	if a.w == nil {
		return WorkerStatus{}
	}
	st := WorkerStatus{Polled: a.w.aPolled.Load(), Busy: int(a.w.aBusy.Load()), StopPod: a.w.aStopPod.Load()}
	if n := a.w.aIdle.Load(); n != 0 {
		st.IdleSince = time.Unix(0, n)
	}
	return st
}

// SuspendWorker stops handing jobs to an idle worker before its pool suspends it: its polls
// park until ResumeWorker. It reports false, and changes nothing, when the worker holds a job
// (or takes one meanwhile) or is unknown.
func (js *Jobs) SuspendWorker(ctx context.Context, worker string) bool {
	if !js.suspendLocal(worker) {
		return false
	}
	// On a shared store the worker may have taken a job through another replica since the
	// last merge: the store says. (One taken there after this read follows the worker-lost
	// rule once the worker is stopped, or goes silent suspended: DESIGN.md.)
	held := js.heldInStore(ctx, worker)
	if len(held) == 0 {
		return true
	}
	sh, w := js.workers.lock(worker)
	defer sh.mu.Unlock()
	if w != nil {
		for _, id := range held {
			w.held[id] = true
		}
		if w.suspended {
			js.resumeLocked(w)
		}
		w.publishActivity()
	}
	return false
}

// suspendLocal is SuspendWorker as far as this replica knows the worker's jobs.
func (js *Jobs) suspendLocal(worker string) bool {
	sh, w := js.workers.lock(worker)
	defer sh.mu.Unlock()
	if w == nil || w.busy() > 0 {
		return false
	}
	if !w.suspended {
		w.suspended = true
		w.resumed = make(chan struct{})
	}
	for _, cancel := range w.takes {
		cancel()
	}
	for len(w.takes) > 0 { // a Take may be moving a job to the worker right now
		sh.takes.Wait()
	}
	if w.busy() > 0 {
		js.resumeLocked(w)
		return false
	}
	return true
}

// ResumeWorker lets a suspended worker take jobs again; its next poll counts as its first.
func (js *Jobs) ResumeWorker(worker string) {
	sh, w := js.workers.lock(worker)
	defer sh.mu.Unlock()
	if w != nil && w.suspended {
		js.resumeLocked(w)
		w.polled = false
		w.lastSeen = js.clock.Now()
		w.publishActivity()
	}
}

func (js *Jobs) resumeLocked(w *workerState) {
	w.suspended = false
	close(w.resumed)
}

// Condition is what the scheduler reports about an endpoint beyond its workers' own state:
// workers it cannot place or that crash, and its cold starts.
type Condition struct {
	Throttled int    // workers wanted that no pool has room for
	Unhealthy int    // workers that crashed or missed their init timeout in the current streak
	Suspended int    // FLASHBOOT workers kept suspended
	Reason    string // why queued jobs wait, when something is wrong; shown on their status
	// Workers the job engine does not see (a LOAD_BALANCER endpoint's), by state.
	Idle, Running, Initializing int
	// Cold starts: how many, and how long they took (from the decision to start or resume a
	// worker to its first poll).
	ColdStarts     int64
	ColdStartLast  time.Duration
	ColdStartTotal time.Duration
}

// SetCondition records the scheduler's view of an endpoint for /health and job status.
func (js *Jobs) SetCondition(endpoint string, c Condition) {
	js.countsOf(endpoint).cond.Store(&c)
}

// condition returns the endpoint's last condition (zero if none); on a replica that follows,
// what the leader published of it (jobs_shared.go).
func (js *Jobs) condition(ctx context.Context, endpoint string) Condition {
	if f, ok := js.sharedFigures(ctx, endpoint); ok {
		return Condition{Throttled: f.Throttled, Unhealthy: f.Unhealthy, Suspended: f.Suspended, Reason: f.Reason,
			ColdStarts: f.ColdStarts, ColdStartLast: f.ColdStartLast, ColdStartTotal: f.ColdStartTotal}
	}
	return js.localCondition(endpoint)
}

// localCondition returns the endpoint's last condition as this replica's scheduler set it.
func (js *Jobs) localCondition(endpoint string) Condition {
	if c := js.countsOf(endpoint).cond.Load(); c != nil {
		return *c
	}
	return Condition{}
}

// Load is an endpoint's job counts as the autoscaler reads them.
type Load struct {
	Queued     int64 // IN_QUEUE jobs that may scale the endpoint up (not lowPriority)
	LowQueued  int64 // lowPriority IN_QUEUE jobs
	InProgress int64
	Submitted  int64 // jobs that ever entered IN_QUEUE (submits, retries, requeues)
	ExecMs     int64 // total execution time of jobs that left IN_PROGRESS
	ExecCount  int64 // how many jobs that is
	// OldestQueuedAt is when the oldest queued job that may scale the endpoint up was
	// queued; zero when none.
	OldestQueuedAt time.Time
}

// LoadCounter reads one endpoint's Load without looking the endpoint's counters up each time.
// It holds the counters themselves, not the engine's record of them: the autoscaler reads every
// endpoint's on every tick, and under load each pointer it follows is a likely cache miss.
type LoadCounter struct {
	c      *Counters
	oldest func() time.Time  // see counters
	stats  func() QueueStats // see counters
}

// LoadCounter returns the endpoint's counter.
func (js *Jobs) LoadCounter(endpoint string) LoadCounter {
	c := js.countersOf(endpoint)
	return LoadCounter{c: c.c, oldest: c.oldest, stats: c.stats}
}

// Load returns the counts. With a CountingStore they are a few atomic loads from one struct,
// and the oldest queued job is looked for only when oldest asks for it (QUEUE_DELAY reads it;
// REQUEST_COUNT and the metrics do not) and one may scale the endpoint up: that look takes the
// endpoint's queue lock, which its takers and submitters contend for under load. A store read
// through stats gives it at no extra cost, so it is always there.
func (l LoadCounter) Load(oldest bool) Load {
	if l.stats != nil {
		return l.statsLoad()
	}
	c := l.c
	low := c.LowQueued.Load()
	ld := Load{Queued: c.Queued.Load() - low, LowQueued: low, InProgress: c.InProgress.Load(),
		Submitted: c.Submitted.Load(), ExecMs: c.ExecMs.Load(), ExecCount: c.ExecCount.Load()}
	if oldest && ld.Queued > 0 {
		ld.OldestQueuedAt = l.oldest()
	}
	return ld
}

// statsLoad is Load from a store read.
func (l LoadCounter) statsLoad() Load {
	c := l.c
	st := l.stats()
	return Load{Queued: st.Queued - st.LowQueued, LowQueued: st.LowQueued, InProgress: st.InProgress, OldestQueuedAt: st.OldestQueuedAt,
		Submitted: c.Submitted.Load(), ExecMs: c.ExecMs.Load(), ExecCount: c.ExecCount.Load()}
}

// SetCondition is Jobs.SetCondition without the lookup.
func (l LoadCounter) SetCondition(c Condition) { l.c.cond.Store(&c) }

// Load returns the endpoint's counts, with the oldest queued job's time.
func (js *Jobs) Load(endpoint string) Load { return js.LoadCounter(endpoint).Load(true) }

// ListenAvailable calls fn with the endpoint each time a job may have become available there,
// until ctx ends: the store's wake-up, which the scheduler's demand listens to.
func (js *Jobs) ListenAvailable(ctx context.Context, fn func(endpoint string)) error {
	return js.store.ListenAvailable(ctx, fn)
}

// WorkerInfo is one worker of an endpoint as the scheduler runs it (worker visibility).
type WorkerInfo struct {
	ID        string
	Status    string // INITIALIZING, IDLE, RUNNING, UNHEALTHY, SUSPENDED, STOPPING, EXITED
	Pool      string
	GPUs      []int
	StartedAt time.Time     // its last start or resume
	ColdStart time.Duration // how long that start or resume took; 0 while initializing
	Jobs      int           // jobs it holds, or LOAD_BALANCER requests in flight
	ExitedAt  time.Time     // EXITED workers
	Error     string        // why an EXITED worker ended, when it failed
}

// Fleet shows an endpoint's workers and their output; the scheduler implements it.
type Fleet interface {
	// Workers returns the endpoint's workers, newest first, then the ones that exited lately.
	EndpointWorkers(endpoint string) []WorkerInfo
	// WorkerLogs returns the last tail lines of a worker's output; KindNotFound when the
	// endpoint has no such worker (running or lately exited), KindUnavailable when its pool
	// keeps no logs.
	WorkerLogs(ctx context.Context, endpoint, worker string, tail int) (io.ReadCloser, error)
}
