package core

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// WorkerLostAfter is how long a worker may stay silent (no poll, ping or post) before its jobs
// are taken back.
const WorkerLostAfter = 30 * time.Second

// HotQueueBytes bounds the records and inputs of queued jobs kept in memory, so that most
// takes need no store read (the head of a queue is what workers take next). Past it, queued
// jobs wait on disk only.
const HotQueueBytes = 16 << 20

// MaxStreamBacklog is how many bytes of stream chunks a job may hold unread; past it the job
// fails rather than grow without bound.
const MaxStreamBacklog = 64 << 20

// Jobs is the job engine: the state machine applied to live jobs, their retention, the
// runsync waiters and stream readers, and the workers that hold jobs.
//
// Memory holds an index entry per live job (state, endpoint, expiry), free of pointers but for
// the rarely set extras; the full record lives in the store and is attached only while a worker
// runs the job. A million queued jobs cost a million small entries that the garbage collector
// need not scan, not a million records: status reads pay one store read instead.
type Jobs struct {
	store    JobRecords
	dispatch Dispatcher
	notify   Notifier
	meter    Meter
	usage    UsageStore
	clock    Clock
	log      *slog.Logger

	shards [1024]shard
	seq    atomic.Uint64

	dmu       sync.Mutex
	deadlines deadlineHeap

	wmu     sync.Mutex
	wcond   *sync.Cond              // on wmu: broadcast when a Take call ends
	workers map[string]*workerState // by worker id
	tokens  *WorkerTokens
	// draining (under wmu): the server is stopping; Take hands out nothing (jobs_drain.go).
	draining bool
	signals  WorkerSignals // to the scheduler: workers ready and lost (workersignals.go)

	counts sync.Map // endpoint -> *endpointCounts

	hotBytes atomic.Int64 // bytes held by hot copies of queued jobs

	epMu    sync.RWMutex
	epIDs   map[string]uint32 // interned endpoint ids
	epNames []string

	webhookBacklog webhookBacklog // webhooks the notifier had no room for (jobs_webhook.go)
}

type JobsConfig struct {
	Store    JobRecords
	Dispatch Dispatcher
	Notify   Notifier // nil = webhooks are not delivered
	// Meter prices the jobs of metered endpoints (ready-made models) when they complete, and
	// Usage records each charge; both or neither. nil = nothing is metered.
	Meter Meter
	Usage UsageStore
	Clock Clock
	Log   *slog.Logger
	// Tokens issues and checks worker tokens. nil = a key of this process's own, with
	// revocations in its memory: tokens die with the process (tests and one-process rigs).
	Tokens *WorkerTokens
}

// NewJobs returns an engine with no jobs; call Recover to load stored ones.
func NewJobs(c JobsConfig) *Jobs {
	if (c.Meter == nil) != (c.Usage == nil) {
		panic("core: JobsConfig needs both Meter and Usage, or neither")
	}
	j := &Jobs{store: c.Store, dispatch: c.Dispatch, notify: c.Notify, meter: c.Meter, usage: c.Usage, clock: c.Clock, log: c.Log,
		workers: map[string]*workerState{}, tokens: c.Tokens, epIDs: map[string]uint32{},
		signals: WorkerSignals{ready: make(chan struct{}, 1)}}
	if j.tokens == nil {
		j.tokens = newMemoryWorkerTokens(c.Clock)
	}
	j.wcond = sync.NewCond(&j.wmu)
	if j.log == nil {
		j.log = slog.Default()
	}
	for i := range j.shards {
		j.shards[i].jobs = map[JobKey]liveJob{}
	}
	return j
}

// Submission is a job request as the API decoded it.
type Submission struct {
	// Owner is the user submitting the job; "" = the endpoint's owner. On a shared endpoint
	// (a ready-made model's) it is the caller, and only they can see the job.
	Owner    string
	Input    []byte // the raw JSON of `input`
	Webhook  string
	Policy   JobPolicy
	S3Config json.RawMessage
	Sync     bool          // runsync
	Wait     time.Duration // runsync's wait, for retention
}

// Submit creates a job IN_QUEUE and hands it to the dispatcher. An async job is durable before
// Submit returns; a runsync job is not synced first (its client waits on the connection).
func (js *Jobs) Submit(ep *Endpoint, s Submission) (Job, error) {
	now := js.clock.Now()
	key := NewJobKey(s.Sync)
	rec := &Job{
		ID: key.String(), Endpoint: ep.ID, Owner: cmp.Or(s.Owner, ep.Owner), Status: InQueue, Sync: s.Sync,
		Webhook: s.Webhook, Policy: s.Policy, S3Config: s.S3Config,
		TimeoutMs: cmpOr(s.Policy.ExecutionTimeoutMs, ep.TimeoutMs),
		Seq:       js.seq.Add(1), CreatedAt: now, QueuedAt: now,
		Retention: RunRetention,
	}
	if s.Sync {
		rec.Retention = RunSyncRetention
		if s.Wait >= LongWait {
			rec.Retention = RunSyncLongRetention
		}
	}
	rec.ExpiresAt = now.Add(ttlOf(rec))
	if err := js.store.PutJob(rec, s.Input, !s.Sync); err != nil {
		return Job{}, Internal("storing the job", err)
	}
	snap := *rec // taken before the job is published: a worker may change rec from then on
	lj := liveJob{expiresAt: rec.ExpiresAt.UnixNano(), ep: js.epIntern(ep.ID), state: stQueued, sync: s.Sync,
		low: s.Policy.LowPriority}
	var x *jobExtra
	if size := int64(len(s.Input) + hotRecordOverhead); js.hotBytes.Add(size) <= HotQueueBytes {
		x = &jobExtra{hot: &hotCopy{rec: rec, input: s.Input, size: size}}
	} else {
		js.hotBytes.Add(-size)
	}
	sh := js.shard(key)
	sh.mu.Lock()
	e := &entry{liveJob: lj, x: x, key: key, sh: sh}
	e.unlock()
	js.count(ep.ID, "", InQueue, lj.low)
	js.schedule(key, rec.ExpiresAt, dlExpire)
	js.dispatch.Enqueue(ep.ID, key)
	return snap, nil
}

// ttlOf is a job's lifetime from submit.
func ttlOf(j *Job) time.Duration {
	if j.Policy.TTLMs > 0 {
		return time.Duration(j.Policy.TTLMs) * time.Millisecond
	}
	return DefaultJobTTL
}

func cmpOr(a, b int64) int64 {
	if a != 0 {
		return a
	}
	return b
}

func notFound(id string) error {
	return Errorf(KindNotFound, "job %q not found (unknown, or its result expired)", id)
}

// JobRef names a job for a caller's operation: the endpoint it was submitted to, its id and,
// when set, the user asking. A job whose Owner is not that user is not found for them: the jobs
// of a shared ready-made model endpoint belong to whoever submitted them.
type JobRef struct {
	Endpoint string
	ID       string
	Owner    string // "" = any owner (internal callers)
}

func (js *Jobs) view(ref JobRef, fn func(e *entry, rec *Job)) (Job, error) {
	e, err := js.lookup(ref.Endpoint, ref.ID)
	if err != nil {
		return Job{}, err
	}
	defer e.unlock()
	rec, err := js.record(e)
	if err != nil {
		return Job{}, err
	}
	if err := owned(ref, rec); err != nil {
		return Job{}, err
	}
	if fn != nil {
		fn(e, rec)
	}
	out := *rec
	if out.Status == InQueue {
		out.Reason = js.condition(ref.Endpoint).Reason
	}
	return out, nil
}

// Get returns a job. A positive ttl sets the job to expire ttl from now.
func (js *Jobs) Get(ref JobRef, ttl time.Duration) (Job, error) {
	if ttl <= 0 {
		return js.view(ref, nil)
	}
	return js.view(ref, func(e *entry, rec *Job) {
		rec.ExpiresAt = js.clock.Now().Add(ttl)
		js.save(e, rec)
		js.schedule(e.key, rec.ExpiresAt, dlExpire)
	})
}

// Wait returns the job once it ends or when wait passes (or ctx ends), whichever is first.
func (js *Jobs) Wait(ctx context.Context, ref JobRef, wait time.Duration) (Job, error) {
	e, err := js.lookupRef(ref)
	if err != nil {
		return Job{}, err
	}
	done := e.ended()
	e.unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
	return js.Get(ref, 0)
}

// end moves a job to a terminal state: retention starts, waiters wake, the webhook fires, and
// the record is detached (it lives in the store). Called with the shard locked; it reports
// whether the caller must sync once unlocked (every job but a runsync one, whose client waits
// on the connection).
func (js *Jobs) end(e *entry, rec *Job, ev Event, to JobStatus) (syncNeeded bool) {
	from := rec.Status
	now := js.clock.Now()
	rec.Status = to
	rec.EndedAt = now
	rec.ExpiresAt = now.Add(rec.Retention)
	js.count(rec.Endpoint, from, to, rec.Policy.LowPriority)
	webhook := rec.Webhook != "" && js.notify != nil && (to == Completed || to == Failed || to == TimedOut)
	rec.WebhookPending = webhook // written with the end: a crash before delivery loses nothing
	if from == InProgress && !rec.StartedAt.IsZero() {
		c := js.countsOf(rec.Endpoint)
		c.execMs.Add(now.Sub(rec.StartedAt).Milliseconds())
		c.execCount.Add(1)
	}
	js.save(e, rec)
	if e.x != nil {
		e.x.rec = nil
	}
	js.dropHot(e)
	e.wake()
	js.schedule(e.key, rec.ExpiresAt, dlExpire)
	if rec.WorkerID != "" {
		js.release(rec.WorkerID, rec.ID, from == InProgress && (ev == EvCancel || ev == EvTimeout))
	}
	if webhook {
		js.sendWebhook(rec)
	}
	return !rec.Sync
}

// begin locks a job for a caller's event: it checks the caller may see the job and the
// transition is allowed, and returns the entry (locked), its record and the state the event
// leads to.
func (js *Jobs) begin(ref JobRef, ev Event) (*entry, *Job, JobStatus, error) {
	e, err := js.lookupRef(ref)
	if err != nil {
		return nil, nil, "", err
	}
	to, err := Next(e.status(), ev)
	if err == nil {
		var rec *Job
		if rec, err = js.record(e); err == nil {
			return e, rec, to, nil
		}
	}
	e.unlock()
	return nil, nil, "", err
}

// Cancel cancels a queued or running job; a running job's worker is told to stop.
func (js *Jobs) Cancel(ref JobRef) (Job, error) {
	e, rec, to, err := js.begin(ref, EvCancel)
	if err != nil {
		return Job{}, err
	}
	needSync := js.end(e, rec, EvCancel, to)
	snap := *rec
	e.unlock()
	return snap, js.sync(needSync)
}

// Retry puts a FAILED or TIMED_OUT job back in the queue: same id, same input, output removed.
func (js *Jobs) Retry(ref JobRef) (Job, error) {
	e, rec, _, err := js.begin(ref, EvRetry)
	if err != nil {
		return Job{}, err
	}
	js.requeue(e, rec, true)
	js.countsOf(ref.Endpoint).retried.Add(1)
	snap, key := *rec, e.key
	e.unlock()
	if err := js.sync(!snap.Sync); err != nil {
		return Job{}, err
	}
	js.dispatch.Enqueue(ref.Endpoint, key)
	return snap, nil
}

// requeue puts a job back IN_QUEUE (retry, worker lost, or a graceful stop's release) and
// detaches its record; spend counts one more retry (a release spends none). Called with the
// shard locked; the caller syncs and enqueues the job once unlocked.
func (js *Jobs) requeue(e *entry, rec *Job, spend bool) {
	now := js.clock.Now()
	js.count(rec.Endpoint, rec.Status, InQueue, rec.Policy.LowPriority)
	rec.Status = InQueue
	rec.Output, rec.Error, rec.WorkerID, rec.Cost = nil, "", "", nil
	if spend {
		rec.Retries++
	}
	rec.QueuedAt, rec.StartedAt, rec.EndedAt = now, time.Time{}, time.Time{}
	rec.ExpiresAt = now.Add(ttlOf(rec))
	if x := e.x; x != nil {
		x.rec, x.stream = nil, nil
		if x.done != nil {
			select {
			case <-x.done:
				x.done = nil // a new run: a new end
			default:
			}
		}
	}
	js.save(e, rec)
	js.schedule(e.key, rec.ExpiresAt, dlExpire)
}

// Purge cancels every queued job of the endpoint; running jobs are not touched.
func (js *Jobs) Purge(endpoint string) int { return js.PurgeOwned(endpoint, "") }

// PurgeOwned cancels the endpoint's queued jobs that owner submitted ("" = every owner's), as
// purge-queue on a shared ready-made model endpoint does; running jobs are not touched.
func (js *Jobs) PurgeOwned(endpoint, owner string) int {
	epID, ok := js.epFind(endpoint)
	if !ok {
		return 0
	}
	n, needSync := 0, false
	for i := range js.shards {
		sh := &js.shards[i]
		sh.mu.Lock()
		for key, lj := range sh.jobs {
			if lj.ep != epID || lj.state != stQueued {
				continue
			}
			e := sh.entry(key, lj)
			if owner != "" {
				if e.x != nil && e.x.hot != nil && e.x.hot.rec.Owner != owner {
					continue // peeked at without taking the hot copy
				}
			}
			rec, err := js.record(e)
			if err != nil {
				js.log.Error("purging a job", "job", key.String(), "err", err)
				continue
			}
			if owner != "" && rec.Owner != owner {
				continue // read from the store: the entry is unchanged
			}
			rec.Error = "purged from the queue"
			needSync = js.end(e, rec, EvPurge, Cancelled) || needSync
			e.store()
			n++
		}
		sh.mu.Unlock()
	}
	_ = js.sync(needSync) // logged; the purge itself has happened
	return n
}
