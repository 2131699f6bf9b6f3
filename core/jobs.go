package core

import (
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
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

// MaxStreamBacklog is how many bytes of stream chunks a job may hold unread; past it the job
// fails rather than grow without bound.
const MaxStreamBacklog = 64 << 20

// memOutput is the largest output kept in memory; larger outputs are read from the store.
const memOutput = 64 << 10

// Jobs is the job engine: the state machine applied to live jobs, their retention, the
// runsync waiters and stream readers, and the workers that hold jobs.
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
}

type shard struct {
	mu   sync.Mutex
	jobs map[string]*liveJob
}

// liveJob is a job in memory, guarded by its shard's lock.
type liveJob struct {
	Job
	outputOnDisk bool // Output is in the store only
	// done is closed when the job ends; made only when someone waits (most jobs never have a
	// waiter, and a million queued jobs should not carry a million channels).
	done       chan struct{}
	chunks     []json.RawMessage
	chunkBytes int
	chunkSig   chan struct{} // signalled when a chunk arrives or the job ends; made by a reader
}

// ended returns a channel closed once the job ends. The shard is locked.
func (j *liveJob) ended() <-chan struct{} {
	if j.done == nil {
		j.done = make(chan struct{})
		if j.Status.Terminal() {
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
	if j.chunkSig != nil {
		signal(j.chunkSig)
	}
}

type endpointCounts struct {
	inQueue, inProgress, completed, failed, retried atomic.Int64
}

type workerState struct {
	id, endpoint string
	token        string
	lastSeen     time.Time
	polled       bool // has polled for a job at least once
	held         map[string]bool
	stop         chan string // job ids the worker must stop
	stopPod      bool
	unhealthy    string // why the worker reported itself unhealthy; "" = healthy
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
	j := &liveJob{Job: Job{
		ID: newJobID(s.Sync), Endpoint: ep.ID, Owner: ep.Owner, Status: InQueue, Sync: s.Sync,
		Webhook: s.Webhook, Policy: s.Policy, S3Config: s.S3Config,
		TimeoutMs: cmpOr(s.Policy.ExecutionTimeoutMs, ep.TimeoutMs),
		Seq:       js.seq.Add(1), CreatedAt: now, QueuedAt: now,
		Retention: RunRetention,
	}}
	if s.Sync {
		j.Retention = RunSyncRetention
		if s.Wait >= LongWait {
			j.Retention = RunSyncLongRetention
		}
	}
	j.ExpiresAt = now.Add(js.ttl(&j.Job))
	if err := js.store.PutJob(&j.Job, s.Input, !s.Sync); err != nil {
		return Job{}, Internal("storing the job", err)
	}
	sh := js.shard(j.ID)
	sh.mu.Lock()
	sh.jobs[j.ID] = j
	snap := j.Job
	sh.mu.Unlock()
	js.count(ep.ID, "", InQueue)
	js.schedule(j.ID, j.ExpiresAt, dlExpire)
	js.dispatch.Enqueue(ep.ID, j.ID)
	return snap, nil
}

func (js *Jobs) ttl(j *Job) time.Duration {
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
// another endpoint's. The caller holds no lock; the returned shard is locked.
func (js *Jobs) lookup(endpoint, id string) (*shard, *liveJob, error) {
	sh := js.shard(id)
	sh.mu.Lock()
	j, ok := sh.jobs[id]
	if !ok || j.Endpoint != endpoint || !js.clock.Now().Before(j.ExpiresAt) {
		sh.mu.Unlock()
		return nil, nil, Errorf(KindNotFound, "job %q not found (unknown, or its result expired)", id)
	}
	return sh, j, nil
}

// snapshot copies a job for the caller, reading a large output back from the store.
func (js *Jobs) snapshot(j *liveJob) Job {
	snap := j.Job
	if j.outputOnDisk {
		if stored, err := js.store.GetJob(j.ID); err == nil {
			snap.Output = stored.Output
		}
	}
	return snap
}

// Get returns a job of the endpoint. A positive ttl sets the job to expire ttl from now.
func (js *Jobs) Get(endpoint, id string, ttl time.Duration) (Job, error) {
	sh, j, err := js.lookup(endpoint, id)
	if err != nil {
		return Job{}, err
	}
	if ttl > 0 {
		j.ExpiresAt = js.clock.Now().Add(ttl)
		js.persist(j)
		js.schedule(j.ID, j.ExpiresAt, dlExpire)
	}
	onDisk := j.outputOnDisk
	snap := j.Job
	sh.mu.Unlock()
	if onDisk {
		if stored, err := js.store.GetJob(id); err == nil {
			snap.Output = stored.Output
		}
	}
	return snap, nil
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

// persist writes the job without waiting for the disk; called with the shard locked, so the
// writes of one job land in order. Operations that must be durable call sync once unlocked.
func (js *Jobs) persist(j *liveJob) {
	rec := &j.Job
	if j.outputOnDisk {
		// The record in memory has no output; keep the stored one.
		if stored, err := js.store.GetJob(j.ID); err == nil {
			cp := j.Job
			cp.Output = stored.Output
			rec = &cp
		}
	}
	if err := js.store.PutJob(rec, nil, false); err != nil {
		js.log.Error("storing job", "job", j.ID, "err", err)
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

// end moves a job to a terminal state: retention starts, waiters wake, the webhook fires.
// Called with the shard locked; it reports whether the caller must sync once unlocked (every
// job but a runsync one, whose client waits on the connection).
func (js *Jobs) end(j *liveJob, ev Event, to JobStatus) (syncNeeded bool) {
	from := j.Status
	now := js.clock.Now()
	j.Status = to
	j.EndedAt = now
	j.ExpiresAt = now.Add(j.Retention)
	js.count(j.Endpoint, from, to)
	js.persist(j)
	if len(j.Output) > memOutput {
		j.Output, j.outputOnDisk = nil, true
	}
	j.wake()
	js.schedule(j.ID, j.ExpiresAt, dlExpire)
	if j.WorkerID != "" {
		js.release(j.WorkerID, j.ID, from == InProgress && (ev == EvCancel || ev == EvTimeout))
	}
	if j.Webhook != "" && js.notify != nil && (to == Completed || to == Failed || to == TimedOut) {
		js.sendWebhook(j)
	}
	return !j.Sync
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Cancel cancels a queued or running job; a running job's worker is told to stop.
func (js *Jobs) Cancel(endpoint, id string) (Job, error) {
	sh, j, err := js.lookup(endpoint, id)
	if err != nil {
		return Job{}, err
	}
	to, err := Next(j.Status, EvCancel)
	if err != nil {
		sh.mu.Unlock()
		return Job{}, err
	}
	needSync := js.end(j, EvCancel, to)
	snap := j.Job
	sh.mu.Unlock()
	return snap, js.sync(needSync)
}

// Retry puts a FAILED or TIMED_OUT job back in the queue: same id, same input, output removed.
func (js *Jobs) Retry(endpoint, id string) (Job, error) {
	sh, j, err := js.lookup(endpoint, id)
	if err != nil {
		return Job{}, err
	}
	to, err := Next(j.Status, EvRetry)
	if err != nil {
		sh.mu.Unlock()
		return Job{}, err
	}
	js.requeue(j, to)
	js.countsOf(endpoint).retried.Add(1)
	snap := j.Job
	sh.mu.Unlock()
	if err := js.sync(!snap.Sync); err != nil {
		return Job{}, err
	}
	js.dispatch.Enqueue(endpoint, id)
	return snap, nil
}

// requeue puts a job back IN_QUEUE (retry or worker lost). Called with the shard locked; the
// caller enqueues it once unlocked.
func (js *Jobs) requeue(j *liveJob, to JobStatus) {
	now := js.clock.Now()
	js.count(j.Endpoint, j.Status, to)
	j.Status = to
	j.Output, j.outputOnDisk, j.Error = nil, false, ""
	j.WorkerID = ""
	j.Retries++
	j.QueuedAt, j.StartedAt, j.EndedAt = now, time.Time{}, time.Time{}
	j.ExpiresAt = now.Add(js.ttl(&j.Job))
	j.chunks, j.chunkBytes = nil, 0
	if j.done != nil {
		select {
		case <-j.done:
			j.done = nil // a new run: a new end
		default:
		}
	}
	js.persist(j)
	js.schedule(j.ID, j.ExpiresAt, dlExpire)
}

// Purge cancels every queued job of the endpoint; running jobs are not touched.
func (js *Jobs) Purge(endpoint string) int {
	n, needSync := 0, false
	for i := range js.shards {
		sh := &js.shards[i]
		sh.mu.Lock()
		for _, j := range sh.jobs {
			if j.Endpoint == endpoint && j.Status == InQueue {
				j.Error = "purged from the queue"
				needSync = js.end(j, EvPurge, Cancelled) || needSync
				n++
			}
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

// --- Streaming -------------------------------------------------------------------------------

// StreamPart records one part a worker streamed, split into chunks of at most MaxStreamChunk.
func (js *Jobs) StreamPart(endpoint, worker, id string, part json.RawMessage) error {
	sh, j, err := js.held(endpoint, worker, id)
	if err != nil {
		return err
	}
	needSync := false
	defer func() { sh.mu.Unlock(); _ = js.sync(needSync) }()
	j.Streamed = true
	for _, c := range SplitChunk(part, MaxStreamChunk) {
		j.chunks = append(j.chunks, c)
		j.chunkBytes += len(c)
	}
	if j.chunkBytes > MaxStreamBacklog {
		j.Error = fmt.Sprintf("the job streamed more than %d MB that no one read; read /stream while it runs", MaxStreamBacklog>>20)
		needSync = js.end(j, EvFail, Failed)
		return nil
	}
	if j.chunkSig != nil {
		signal(j.chunkSig)
	}
	return nil
}

// ReadStream hands out the chunks not yet read, waiting up to wait for one to arrive while the
// job runs. Each chunk is handed out once.
func (js *Jobs) ReadStream(ctx context.Context, endpoint, id string, wait time.Duration) (Job, []json.RawMessage, error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		sh, j, err := js.lookup(endpoint, id)
		if err != nil {
			return Job{}, nil, err
		}
		if len(j.chunks) > 0 || j.Status.Terminal() {
			chunks := j.chunks
			j.chunks, j.chunkBytes = nil, 0
			snap := j.Job
			sh.mu.Unlock()
			return snap, chunks, nil
		}
		if j.chunkSig == nil {
			j.chunkSig = make(chan struct{}, 1)
		}
		sig := j.chunkSig
		sh.mu.Unlock()
		select {
		case <-sig:
		case <-deadline.C:
			snap, err := js.Get(endpoint, id, 0)
			return snap, nil, err
		case <-ctx.Done():
			snap, err := js.Get(endpoint, id, 0)
			return snap, nil, err
		}
	}
}

// SplitChunk splits a streamed part over several chunks when it is larger than limit: a
// string into shorter strings (on character boundaries), an array into shorter arrays, any
// other value into string pieces of its JSON text.
func SplitChunk(part json.RawMessage, limit int) []json.RawMessage {
	if len(part) <= limit {
		return []json.RawMessage{part}
	}
	var s string
	if err := json.Unmarshal(part, &s); err != nil {
		var arr []json.RawMessage
		if json.Unmarshal(part, &arr) == nil && len(arr) > 1 {
			var out []json.RawMessage
			cur, size := []json.RawMessage{}, 2
			for _, el := range arr {
				if size+len(el)+1 > limit && len(cur) > 0 {
					b, _ := json.Marshal(cur)
					out = append(out, b)
					cur, size = nil, 2
				}
				cur, size = append(cur, el), size+len(el)+1
			}
			b, _ := json.Marshal(cur)
			return append(out, b)
		}
		s = string(part)
	}
	var out []json.RawMessage
	step := max(limit/2-16, 1) // JSON escaping can double a string's size
	for len(s) > 0 {
		n := min(step, len(s))
		for n < len(s) && n > 0 && !utf8Start(s[n]) {
			n--
		}
		b, _ := json.Marshal(s[:n])
		out = append(out, b)
		s = s[n:]
	}
	return out
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// --- Workers ---------------------------------------------------------------------------------

// RegisterWorker records a worker about to start and returns its token.
func (js *Jobs) RegisterWorker(endpoint, worker string) string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	token := "gw_" + hex.EncodeToString(b)
	js.wmu.Lock()
	defer js.wmu.Unlock()
	js.workers[worker] = &workerState{id: worker, endpoint: endpoint, token: token, lastSeen: js.clock.Now(),
		held: map[string]bool{}, stop: make(chan string, 64)}
	js.tokens[token] = worker
	return token
}

// ForgetWorker removes a worker that stopped; its jobs follow the worker-lost rule.
func (js *Jobs) ForgetWorker(worker string) {
	js.loseWorker(worker)
	js.wmu.Lock()
	defer js.wmu.Unlock()
	if w, ok := js.workers[worker]; ok {
		delete(js.tokens, w.token)
		delete(js.workers, worker)
	}
}

// AuthWorker checks a worker token for a route's endpoint and worker id.
func (js *Jobs) AuthWorker(token, endpoint, worker string) error {
	js.wmu.Lock()
	defer js.wmu.Unlock()
	id, ok := js.tokens[token]
	if !ok {
		return Errorf(KindUnauthorized, "unknown worker token")
	}
	w := js.workers[id]
	if w.endpoint != endpoint || w.id != worker {
		return Errorf(KindForbidden, "this worker token is for worker %s of endpoint %s", w.id, w.endpoint)
	}
	w.lastSeen = js.clock.Now()
	return nil
}

// WorkerStopPod reports whether the worker asked to be recycled.
func (js *Jobs) WorkerStopPod(worker string) bool {
	js.wmu.Lock()
	defer js.wmu.Unlock()
	w, ok := js.workers[worker]
	return ok && w.stopPod
}

// Taken is a job handed to a worker.
type Taken struct {
	ID       string
	Input    json.RawMessage
	S3Config json.RawMessage
}

// Take waits for up to max jobs of the endpoint for the worker, moving each IN_PROGRESS.
// It returns nothing when ctx ends first.
func (js *Jobs) Take(ctx context.Context, endpoint, worker string, max int) []Taken {
	js.wmu.Lock()
	if w, ok := js.workers[worker]; ok {
		w.polled = true
		w.lastSeen = js.clock.Now()
	}
	js.wmu.Unlock()
	for ctx.Err() == nil {
		var out []Taken
		for _, id := range js.dispatch.Take(ctx, endpoint, max) {
			if t, ok := js.take(endpoint, worker, id); ok {
				out = append(out, t)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return nil
}

func (js *Jobs) take(endpoint, worker, id string) (Taken, bool) {
	sh := js.shard(id)
	sh.mu.Lock()
	j, ok := sh.jobs[id]
	now := js.clock.Now()
	if !ok || j.Status != InQueue || !now.Before(j.ExpiresAt) {
		sh.mu.Unlock()
		return Taken{}, false
	}
	js.count(endpoint, InQueue, InProgress)
	j.Status = InProgress
	j.WorkerID = worker
	j.StartedAt = now
	j.Output = nil
	js.persist(j) // a take lost in a crash is taken again: the job runs at least once
	if j.TimeoutMs > 0 {
		js.schedule(j.ID, now.Add(time.Duration(j.TimeoutMs)*time.Millisecond), dlTimeout)
	}
	s3 := j.S3Config
	sh.mu.Unlock()

	js.wmu.Lock()
	if w, ok := js.workers[worker]; ok {
		w.held[id] = true
	}
	js.wmu.Unlock()
	input, err := js.store.Input(id)
	if err != nil {
		js.log.Error("reading a job's input", "job", id, "err", err)
		input = json.RawMessage(`{}`)
	}
	return Taken{ID: id, Input: input, S3Config: s3}, true
}

// held returns a job the worker holds (IN_PROGRESS, taken by it); the shard is locked.
func (js *Jobs) held(endpoint, worker, id string) (*shard, *liveJob, error) {
	sh, j, err := js.lookup(endpoint, id)
	if err != nil {
		return nil, nil, err
	}
	if j.Status != InProgress || j.WorkerID != worker {
		st := j.Status
		sh.mu.Unlock()
		if st.Terminal() {
			return nil, nil, Errorf(KindConflict, "job %s is already %s; this post changes nothing", id, st)
		}
		return nil, nil, Errorf(KindConflict, "job %s is not held by worker %s", id, worker)
	}
	return sh, j, nil
}

// Result is what a worker posts to job-done.
type Result struct {
	Output   json.RawMessage // nil = none
	Error    string          // non-empty: the job failed
	Progress bool            // status IN_PROGRESS: a progress update
	StopPod  bool            // recycle the worker after this job
	TooLarge int64           // > 0: the result was refused for its size (bytes)
}

// Done applies a worker's job-done post.
func (js *Jobs) Done(endpoint, worker, id string, r Result) error {
	sh, j, err := js.held(endpoint, worker, id)
	if err != nil {
		return err
	}
	needSync := false
	if r.StopPod {
		js.wmu.Lock()
		if w, ok := js.workers[worker]; ok {
			w.stopPod = true
		}
		js.wmu.Unlock()
	}
	switch {
	case r.TooLarge > 0 || len(r.Output) > MaxResult:
		size := max(r.TooLarge, int64(len(r.Output)))
		j.Output = nil
		j.Error = fmt.Sprintf("the worker's result is %d bytes, over the %d MB limit; store large outputs elsewhere (e.g. s3Config) and return a reference", size, MaxResult>>20)
		needSync = js.end(j, EvFail, Failed)
	case r.Progress:
		j.Output = r.Output
		js.persist(j)
	case r.Error != "":
		j.Error = r.Error
		if r.Output != nil {
			j.Output = r.Output
		}
		needSync = js.end(j, EvFail, Failed)
	default:
		j.Output = r.Output
		needSync = js.end(j, EvDone, Completed)
	}
	sh.mu.Unlock()
	return js.sync(needSync) // the worker hears 200 only once the result is on disk
}

// JobsToStop waits up to wait for jobs the worker must stop (cancelled or timed out).
func (js *Jobs) JobsToStop(ctx context.Context, worker string, wait time.Duration) []string {
	js.wmu.Lock()
	w, ok := js.workers[worker]
	js.wmu.Unlock()
	if !ok {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case id := <-w.stop:
		ids := []string{id}
		for {
			select {
			case id := <-w.stop:
				ids = append(ids, id)
			default:
				return ids
			}
		}
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}

// Ping records a worker's heartbeat. A non-empty unhealthy reason marks the worker unhealthy
// (a RunPod worker that fails its startup checks pings status=unhealthy, then exits).
func (js *Jobs) Ping(worker, unhealthy string) {
	js.wmu.Lock()
	defer js.wmu.Unlock()
	if w, ok := js.workers[worker]; ok {
		w.lastSeen = js.clock.Now()
		if unhealthy != "" {
			w.unhealthy = unhealthy
		}
	}
}

// release drops a job from its worker; stop tells the worker to stop running it.
func (js *Jobs) release(worker, id string, stop bool) {
	js.wmu.Lock()
	defer js.wmu.Unlock()
	w, ok := js.workers[worker]
	if !ok {
		return
	}
	delete(w.held, id)
	if stop {
		select {
		case w.stop <- id:
		default: // the worker is not reading job-stop; the job is refused when it posts anyway
		}
	}
}

// loseWorker applies the worker-lost rule to the worker's jobs: back to the queue with one
// more retry, or FAILED once the retry budget is spent.
func (js *Jobs) loseWorker(worker string) {
	js.wmu.Lock()
	w, ok := js.workers[worker]
	var ids []string
	if ok {
		for id := range w.held {
			ids = append(ids, id)
		}
		clear(w.held)
	}
	js.wmu.Unlock()
	for _, id := range ids {
		sh := js.shard(id)
		sh.mu.Lock()
		j, ok := sh.jobs[id]
		if !ok || j.Status != InProgress || j.WorkerID != worker {
			sh.mu.Unlock()
			continue
		}
		js.lostJob(j)
		endpoint := j.Endpoint
		queued := j.Status == InQueue
		sh.mu.Unlock()
		_ = js.sync(true)
		if queued {
			js.dispatch.Enqueue(endpoint, id)
		}
	}
}

// lostJob applies the worker-lost rule to one job; the shard is locked. The caller enqueues
// the job if it went back IN_QUEUE, and syncs.
func (js *Jobs) lostJob(j *liveJob) {
	if j.Retries >= RetryBudget {
		j.Error = fmt.Sprintf("the worker running the job was lost %d times; giving up", j.Retries+1)
		js.end(j, EvLost, Failed)
		return
	}
	js.requeue(j, InQueue)
}

// --- Time: expiry, execution timeouts, lost workers -----------------------------------------

type deadlineKind uint8

const (
	dlExpire deadlineKind = iota
	dlTimeout
)

type deadline struct {
	at   time.Time
	id   string
	kind deadlineKind
}

type deadlineHeap []deadline

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, k int) bool { return h[i].at.Before(h[k].at) }
func (h deadlineHeap) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(deadline)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	*h = old[:len(old)-1]
	return d
}

func (js *Jobs) schedule(id string, at time.Time, kind deadlineKind) {
	js.dmu.Lock()
	heap.Push(&js.deadlines, deadline{at: at, id: id, kind: kind})
	js.dmu.Unlock()
}

// Tick applies everything due at now: expired jobs are removed, running jobs past their
// execution timeout become TIMED_OUT, and silent workers lose their jobs. Run it about every
// quarter second; tests call it with an injected clock.
func (js *Jobs) Tick(now time.Time) {
	needSync := false
	for {
		js.dmu.Lock()
		if len(js.deadlines) == 0 || js.deadlines[0].at.After(now) {
			js.dmu.Unlock()
			break
		}
		d := heap.Pop(&js.deadlines).(deadline)
		js.dmu.Unlock()
		needSync = js.due(d, now) || needSync
	}
	_ = js.sync(needSync)
	js.wmu.Lock()
	var lost []string
	for id, w := range js.workers {
		if len(w.held) > 0 && now.Sub(w.lastSeen) > WorkerLostAfter {
			lost = append(lost, id)
		}
	}
	js.wmu.Unlock()
	for _, id := range lost {
		js.log.Warn("worker lost: no heartbeat", "worker", id, "after", WorkerLostAfter)
		js.loseWorker(id)
	}
}

// due handles one deadline; stale deadlines (the job moved on) are ignored. It reports
// whether a sync is needed.
func (js *Jobs) due(d deadline, now time.Time) bool {
	sh := js.shard(d.id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	j, ok := sh.jobs[d.id]
	if !ok {
		return false
	}
	switch d.kind {
	case dlExpire:
		if now.Before(j.ExpiresAt) {
			return false
		}
		if j.Status == InProgress && j.WorkerID != "" {
			js.release(j.WorkerID, j.ID, true)
		}
		js.count(j.Endpoint, j.Status, "")
		delete(sh.jobs, d.id)
		if !j.Status.Terminal() {
			j.wake() // waiters of a job that expired before it ended
		}
		if err := js.store.DeleteJob(d.id); err != nil {
			js.log.Error("deleting an expired job", "job", d.id, "err", err)
		}
	case dlTimeout:
		if j.Status == InProgress && !now.Before(j.StartedAt.Add(time.Duration(j.TimeoutMs)*time.Millisecond)) {
			j.Error = fmt.Sprintf("the job ran longer than its execution timeout of %d ms", j.TimeoutMs)
			return js.end(j, EvTimeout, TimedOut)
		}
	}
	return false
}

// Run ticks every interval until ctx ends.
func (js *Jobs) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			js.Tick(js.clock.Now())
		}
	}
}

// Recover loads the stored jobs after a restart: queued jobs are queued again in their
// original order, jobs that were running follow the worker-lost rule (their workers died with
// the server), finished jobs are kept for the rest of their retention, expired ones deleted.
func (js *Jobs) Recover() (queued, requeued int, err error) {
	now := js.clock.Now()
	var all []*liveJob
	err = js.store.ScanJobs(func(j *Job) {
		all = append(all, &liveJob{Job: *j})
	})
	if err != nil {
		return 0, 0, fmt.Errorf("reading stored jobs: %w", err)
	}
	slices.SortFunc(all, func(a, b *liveJob) int { return cmpU(a.Seq, b.Seq) })
	var expired []string
	for _, j := range all {
		if j.Seq > js.seq.Load() {
			js.seq.Store(j.Seq)
		}
		if !now.Before(j.ExpiresAt) {
			expired = append(expired, j.ID)
			continue
		}
		if len(j.Output) > memOutput {
			j.Output, j.outputOnDisk = nil, true
		}
		sh := js.shard(j.ID)
		sh.mu.Lock()
		sh.jobs[j.ID] = j
		js.count(j.Endpoint, "", j.Status)
		switch j.Status {
		case InProgress:
			j.WorkerID = ""
			js.lostJob(j)
			if j.Status == InQueue {
				requeued++
			}
		case InQueue:
			queued++
		}
		js.schedule(j.ID, j.ExpiresAt, dlExpire)
		status, endpoint := j.Status, j.Endpoint
		sh.mu.Unlock()
		if status == InQueue {
			js.dispatch.Enqueue(endpoint, j.ID)
		}
	}
	for _, id := range expired {
		if err := js.store.DeleteJob(id); err != nil && !errors.Is(err, ErrNotFound) {
			return queued, requeued, err
		}
	}
	return queued, requeued, js.sync(requeued > 0)
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
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

// sendWebhook hands the job's final state to the notifier; the shard is locked.
func (js *Jobs) sendWebhook(j *liveJob) {
	now := js.clock.Now()
	body := WebhookBody{ID: j.ID, Status: j.Status, Output: j.Output, Error: j.Error,
		DelayTime: j.DelayTime(now), ExecutionTime: j.ExecutionTime(now), Retries: j.Retries, WorkerID: j.WorkerID}
	url, id := j.Webhook, j.ID
	go func() {
		if in, err := js.store.Input(id); err == nil {
			body.Input = in
		}
		if body.Output == nil {
			if stored, err := js.store.GetJob(id); err == nil {
				body.Output = stored.Output
			}
		}
		b, err := json.Marshal(body)
		if err != nil {
			js.log.Error("encoding a webhook", "job", id, "err", err)
			return
		}
		js.notify.Notify(url, b)
	}()
}
