package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// JobStore persists jobs. PutJob with durable=true returns only once the write is synced (an
// acknowledged /run job survives kill -9); durable=false may lose the write in a crash until
// the next SyncJobs, which makes every earlier write durable.
type JobStore interface {
	PutJob(j *Job, input []byte, durable bool) error // input nil = keep the stored one
	SyncJobs() error
	GetJob(id string) (*Job, error)  // ErrNotFound
	Input(id string) ([]byte, error) // ErrNotFound
	DeleteJob(id string) error
	ScanJobs(fn func(*Job)) error // every stored job, any order
}

// Dispatcher queues job ids per endpoint and hands them to long-polling workers. It may hand out
// ids that are no longer queued (cancelled, purged, expired): Jobs checks each one.
type Dispatcher interface {
	Enqueue(endpoint, id string)
	// Take waits until it has at least one id (up to max) for endpoint, or ctx is done.
	Take(ctx context.Context, endpoint string, max int) []string
}

// Notifier delivers a job's final state to its webhook.
type Notifier interface {
	Notify(url string, body []byte)
}

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
// Memory holds an index entry per live job (status, endpoint, expiry); the full record lives
// in the store and is attached only while a worker runs the job. A million queued jobs cost a
// million small entries, not a million records: status reads pay one store read instead.
type Jobs struct {
	store    JobStore
	dispatch Dispatcher
	notify   Notifier
	clock    Clock
	log      *slog.Logger

	shards [64]shard
	seed   maphash.Seed
	seq    atomic.Uint64

	dmu       sync.Mutex
	deadlines deadlineHeap

	wmu     sync.Mutex
	workers map[string]*workerState // by worker id
	tokens  map[string]string       // token -> worker id

	counts sync.Map // endpoint -> *endpointCounts

	hotBytes atomic.Int64 // bytes held by hot copies of queued jobs
}

type shard struct {
	mu   sync.Mutex
	jobs map[string]*liveJob
}

// liveJob is a job's index entry, guarded by its shard's lock.
type liveJob struct {
	id        string
	endpoint  string
	status    JobStatus
	sync      bool  // a runsync job: its state changes are not synced
	expiresAt int64 // Unix nanoseconds
	// rec is the full record while a worker runs the job; nil otherwise (read it from the
	// store with Jobs.record).
	rec *Job
	// hot is the record and input of a queued job while the HotQueueBytes budget allows.
	hot *hotCopy
	// done is closed when the job ends; made only when someone waits.
	done   chan struct{}
	stream *streamState // made when a part arrives or a reader waits
}

type hotCopy struct {
	rec   *Job
	input []byte
	size  int64
}

// hotRecordOverhead approximates a record's memory beside its input.
const hotRecordOverhead = 512

// dropHot releases a job's hot copy. The shard is locked.
func (js *Jobs) dropHot(j *liveJob) {
	if j.hot != nil {
		js.hotBytes.Add(-j.hot.size)
		j.hot = nil
	}
}

// ended returns a channel closed once the job ends. The shard is locked.
func (j *liveJob) ended() <-chan struct{} {
	if j.done == nil {
		j.done = make(chan struct{})
		if j.status.Terminal() {
			close(j.done)
		}
	}
	return j.done
}

// wake closes the end channel and signals a stream reader, if there are any. The shard is locked.
func (j *liveJob) wake() {
	if j.done != nil {
		select {
		case <-j.done:
		default:
			close(j.done)
		}
	}
	if j.stream != nil {
		signal(j.stream.sig)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

type endpointCounts struct {
	inQueue, inProgress, completed, failed, retried atomic.Int64
}

// JobsConfig wires a Jobs engine.
type JobsConfig struct {
	Store    JobStore
	Dispatch Dispatcher
	Notify   Notifier // nil = webhooks are not delivered
	Clock    Clock
	Log      *slog.Logger
}

// NewJobs returns an engine with no jobs; call Recover to load stored ones.
func NewJobs(c JobsConfig) *Jobs {
	j := &Jobs{store: c.Store, dispatch: c.Dispatch, notify: c.Notify, clock: c.Clock, log: c.Log,
		seed: maphash.MakeSeed(), workers: map[string]*workerState{}, tokens: map[string]string{}}
	if j.log == nil {
		j.log = slog.Default()
	}
	for i := range j.shards {
		j.shards[i].jobs = map[string]*liveJob{}
	}
	return j
}

func (js *Jobs) shard(id string) *shard {
	return &js.shards[maphash.String(js.seed, id)%uint64(len(js.shards))]
}

func (js *Jobs) countsOf(endpoint string) *endpointCounts {
	if c, ok := js.counts.Load(endpoint); ok {
		return c.(*endpointCounts)
	}
	c, _ := js.counts.LoadOrStore(endpoint, &endpointCounts{})
	return c.(*endpointCounts)
}

// count moves a job between the per-endpoint counters when its state changes.
func (js *Jobs) count(endpoint string, from, to JobStatus) {
	if from == to {
		return
	}
	c := js.countsOf(endpoint)
	c.add(from, -1)
	c.add(to, +1)
}

func (c *endpointCounts) add(s JobStatus, d int64) {
	switch s {
	case InQueue:
		c.inQueue.Add(d)
	case InProgress:
		c.inProgress.Add(d)
	case Completed:
		c.completed.Add(d)
	case Failed, TimedOut:
		c.failed.Add(d)
	}
}

// newJobID returns a random job id; runsync ids start with "sync-" as RunPod's do.
func newJobID(sync bool) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	id := h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	if sync {
		return "sync-" + id
	}
	return id
}

// Submission is a job request as the API decoded it.
type Submission struct {
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
	rec := &Job{
		ID: newJobID(s.Sync), Endpoint: ep.ID, Owner: ep.Owner, Status: InQueue, Sync: s.Sync,
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
	j := &liveJob{id: rec.ID, endpoint: ep.ID, status: InQueue, sync: s.Sync, expiresAt: rec.ExpiresAt.UnixNano()}
	if size := int64(len(s.Input) + hotRecordOverhead); js.hotBytes.Add(size) <= HotQueueBytes {
		j.hot = &hotCopy{rec: rec, input: s.Input, size: size}
	} else {
		js.hotBytes.Add(-size)
	}
	sh := js.shard(j.id)
	sh.mu.Lock()
	sh.jobs[j.id] = j
	sh.mu.Unlock()
	js.count(ep.ID, "", InQueue)
	js.schedule(j.id, rec.ExpiresAt, dlExpire)
	js.dispatch.Enqueue(ep.ID, j.id)
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

// lookup returns the live job of an endpoint, or KindNotFound when it is unknown, expired or
// another endpoint's. On success the returned shard is locked.
func (js *Jobs) lookup(endpoint, id string) (*shard, *liveJob, error) {
	sh := js.shard(id)
	sh.mu.Lock()
	j, ok := sh.jobs[id]
	if !ok || j.endpoint != endpoint || js.clock.Now().UnixNano() >= j.expiresAt {
		sh.mu.Unlock()
		return nil, nil, Errorf(KindNotFound, "job %q not found (unknown, or its result expired)", id)
	}
	return sh, j, nil
}

// record returns the job's full record: the attached one, the hot copy (which it hands over:
// the caller may change the record, so the copy would go stale), or one read from the store.
// The shard is locked.
func (js *Jobs) record(j *liveJob) (*Job, error) {
	if j.rec != nil {
		return j.rec, nil
	}
	if j.hot != nil {
		rec := j.hot.rec
		js.dropHot(j)
		return rec, nil
	}
	rec, err := js.store.GetJob(j.id)
	if err != nil {
		return nil, Internal("reading the job", err)
	}
	return rec, nil
}

// save writes the record without waiting for the disk and refreshes the index entry. The shard
// is locked, so one job's writes land in order; operations that must be durable call sync once
// unlocked.
func (js *Jobs) save(j *liveJob, rec *Job) {
	j.status, j.expiresAt = rec.Status, rec.ExpiresAt.UnixNano()
	if err := js.store.PutJob(rec, nil, false); err != nil {
		js.log.Error("storing job", "job", rec.ID, "err", err)
	}
}

// sync makes the writes so far durable; the shared WAL sync groups concurrent callers.
func (js *Jobs) sync(needed bool) error {
	if !needed {
		return nil
	}
	if err := js.store.SyncJobs(); err != nil {
		js.log.Error("syncing jobs", "err", err)
		return Internal("storing the job", err)
	}
	return nil
}

// view runs fn on a job's record with its shard locked and returns a copy of the record.
func (js *Jobs) view(endpoint, id string, fn func(j *liveJob, rec *Job)) (Job, error) {
	sh, j, err := js.lookup(endpoint, id)
	if err != nil {
		return Job{}, err
	}
	defer sh.mu.Unlock()
	rec, err := js.record(j)
	if err != nil {
		return Job{}, err
	}
	if fn != nil {
		fn(j, rec)
	}
	return *rec, nil
}

// Get returns a job of the endpoint. A positive ttl sets the job to expire ttl from now.
func (js *Jobs) Get(endpoint, id string, ttl time.Duration) (Job, error) {
	if ttl <= 0 {
		return js.view(endpoint, id, nil)
	}
	return js.view(endpoint, id, func(j *liveJob, rec *Job) {
		rec.ExpiresAt = js.clock.Now().Add(ttl)
		js.save(j, rec)
		js.schedule(j.id, rec.ExpiresAt, dlExpire)
	})
}

// Wait returns the job once it ends or when wait passes (or ctx ends), whichever is first.
func (js *Jobs) Wait(ctx context.Context, endpoint, id string, wait time.Duration) (Job, error) {
	sh, j, err := js.lookup(endpoint, id)
	if err != nil {
		return Job{}, err
	}
	done := j.ended()
	sh.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
	return js.Get(endpoint, id, 0)
}

// end moves a job to a terminal state: retention starts, waiters wake, the webhook fires, and
// the record is detached (it lives in the store). Called with the shard locked; it reports
// whether the caller must sync once unlocked (every job but a runsync one, whose client waits
// on the connection).
func (js *Jobs) end(j *liveJob, rec *Job, ev Event, to JobStatus) (syncNeeded bool) {
	from := rec.Status
	now := js.clock.Now()
	rec.Status = to
	rec.EndedAt = now
	rec.ExpiresAt = now.Add(rec.Retention)
	js.count(j.endpoint, from, to)
	js.save(j, rec)
	j.rec = nil
	j.wake()
	js.schedule(j.id, rec.ExpiresAt, dlExpire)
	if rec.WorkerID != "" {
		js.release(rec.WorkerID, j.id, from == InProgress && (ev == EvCancel || ev == EvTimeout))
	}
	if rec.Webhook != "" && js.notify != nil && (to == Completed || to == Failed || to == TimedOut) {
		js.sendWebhook(rec)
	}
	return !rec.Sync
}

// Cancel cancels a queued or running job; a running job's worker is told to stop.
func (js *Jobs) Cancel(endpoint, id string) (Job, error) {
	sh, j, err := js.lookup(endpoint, id)
	if err != nil {
		return Job{}, err
	}
	to, err := Next(j.status, EvCancel)
	if err != nil {
		sh.mu.Unlock()
		return Job{}, err
	}
	rec, err := js.record(j)
	if err != nil {
		sh.mu.Unlock()
		return Job{}, err
	}
	needSync := js.end(j, rec, EvCancel, to)
	snap := *rec
	sh.mu.Unlock()
	return snap, js.sync(needSync)
}

// Retry puts a FAILED or TIMED_OUT job back in the queue: same id, same input, output removed.
func (js *Jobs) Retry(endpoint, id string) (Job, error) {
	sh, j, err := js.lookup(endpoint, id)
	if err != nil {
		return Job{}, err
	}
	if _, err := Next(j.status, EvRetry); err != nil {
		sh.mu.Unlock()
		return Job{}, err
	}
	rec, err := js.record(j)
	if err != nil {
		sh.mu.Unlock()
		return Job{}, err
	}
	js.requeue(j, rec)
	js.countsOf(endpoint).retried.Add(1)
	snap := *rec
	sh.mu.Unlock()
	if err := js.sync(!snap.Sync); err != nil {
		return Job{}, err
	}
	js.dispatch.Enqueue(endpoint, id)
	return snap, nil
}

// requeue puts a job back IN_QUEUE (retry or worker lost) and detaches its record. Called
// with the shard locked; the caller syncs and enqueues the job once unlocked.
func (js *Jobs) requeue(j *liveJob, rec *Job) {
	now := js.clock.Now()
	js.count(j.endpoint, rec.Status, InQueue)
	rec.Status = InQueue
	rec.Output, rec.Error, rec.WorkerID = nil, "", ""
	rec.Retries++
	rec.QueuedAt, rec.StartedAt, rec.EndedAt = now, time.Time{}, time.Time{}
	rec.ExpiresAt = now.Add(ttlOf(rec))
	j.stream = nil
	if j.done != nil {
		select {
		case <-j.done:
			j.done = nil // a new run: a new end
		default:
		}
	}
	js.save(j, rec)
	j.rec = nil
	js.schedule(j.id, rec.ExpiresAt, dlExpire)
}

// Purge cancels every queued job of the endpoint; running jobs are not touched.
func (js *Jobs) Purge(endpoint string) int {
	n, needSync := 0, false
	for i := range js.shards {
		sh := &js.shards[i]
		sh.mu.Lock()
		for _, j := range sh.jobs {
			if j.endpoint != endpoint || j.status != InQueue {
				continue
			}
			rec, err := js.record(j)
			if err != nil {
				js.log.Error("purging a job", "job", j.id, "err", err)
				continue
			}
			rec.Error = "purged from the queue"
			needSync = js.end(j, rec, EvPurge, Cancelled) || needSync
			n++
		}
		sh.mu.Unlock()
	}
	_ = js.sync(needSync) // logged; the purge itself has happened
	return n
}

// Health is an endpoint's job and worker counts (spec 2.10).
type Health struct {
	InQueue, InProgress, Completed, Failed, Retried int64
	Idle, Running, Initializing, Unhealthy          int
	// UnhealthyReasons are the reasons unhealthy workers gave, for operators.
	UnhealthyReasons []string
}

// Health returns the endpoint's counts.
func (js *Jobs) Health(endpoint string) Health {
	c := js.countsOf(endpoint)
	h := Health{InQueue: c.inQueue.Load(), InProgress: c.inProgress.Load(), Completed: c.completed.Load(),
		Failed: c.failed.Load(), Retried: c.retried.Load()}
	js.wmu.Lock()
	defer js.wmu.Unlock()
	for _, w := range js.workers {
		switch {
		case w.endpoint != endpoint:
		case w.unhealthy != "":
			h.Unhealthy++
			h.UnhealthyReasons = append(h.UnhealthyReasons, w.unhealthy)
		case len(w.held) > 0:
			h.Running++
		case !w.polled:
			h.Initializing++
		default:
			h.Idle++
		}
	}
	return h
}

// WebhookBody is what a webhook receives: the final job plus its input.
type WebhookBody struct {
	ID            string          `json:"id"`
	Status        JobStatus       `json:"status"`
	Output        json.RawMessage `json:"output,omitempty"`
	Error         string          `json:"error,omitempty"`
	DelayTime     int64           `json:"delayTime"`
	ExecutionTime int64           `json:"executionTime"`
	Retries       int             `json:"retries"`
	WorkerID      string          `json:"workerId,omitempty"`
	Input         json.RawMessage `json:"input,omitempty"`
}

// sendWebhook hands the job's final state to the notifier; the record is no longer changed.
func (js *Jobs) sendWebhook(rec *Job) {
	now := js.clock.Now()
	body := WebhookBody{ID: rec.ID, Status: rec.Status, Output: rec.Output, Error: rec.Error,
		DelayTime: rec.DelayTime(now), ExecutionTime: rec.ExecutionTime(now), Retries: rec.Retries, WorkerID: rec.WorkerID}
	url := rec.Webhook
	go func() {
		if in, err := js.store.Input(body.ID); err == nil {
			body.Input = in
		}
		b, err := json.Marshal(body)
		if err != nil {
			js.log.Error("encoding a webhook", "job", body.ID, "err", err)
			return
		}
		js.notify.Notify(url, b)
	}()
}
