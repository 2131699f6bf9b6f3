package core

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"strings"
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

// Dispatcher queues job keys per endpoint and hands them to long-polling workers. It may hand
// out keys of jobs no longer queued (cancelled, purged, expired): Jobs checks each one.
type Dispatcher interface {
	Enqueue(endpoint string, key JobKey)
	// Take waits until it has at least one key (up to max) for endpoint, or ctx is done.
	Take(ctx context.Context, endpoint string, max int) []JobKey
}

// Notifier delivers a job's final state to its webhook. It calls done once the delivery has
// succeeded or been given up on; until then the job stays marked for delivery, and a restart
// delivers it again (webhooks are delivered at least once). It reports false when it has no
// room for the delivery now: the job stays marked, and is offered again on a later Tick.
type Notifier interface {
	Notify(url string, body []byte, done func()) bool
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

// JobKey is a job id in binary form: 16 random bytes, and a last byte set for a runsync job. It
// holds no pointers, so the job index (maps, queues, deadlines) keyed by it costs the garbage
// collector next to nothing to scan, however many jobs are queued.
type JobKey [17]byte

// newJobKey returns a random key.
func newJobKey(sync bool) JobKey {
	var k JobKey
	_, _ = rand.Read(k[:16])
	if sync {
		k[16] = 1
	}
	return k
}

// String is the job id: a UUID-shaped hex string, prefixed "sync-" for runsync jobs as RunPod's
// are.
func (k JobKey) String() string {
	var b [41]byte
	n := 0
	if k[16] == 1 {
		n = copy(b[:], "sync-")
	}
	h := hex.EncodeToString(k[:16])
	for i, part := range []string{h[:8], h[8:12], h[12:16], h[16:20], h[20:]} {
		if i > 0 {
			b[n] = '-'
			n++
		}
		n += copy(b[n:], part)
	}
	return string(b[:n])
}

// ParseJobKey reads a job id; ok is false for anything String cannot have produced.
func ParseJobKey(id string) (k JobKey, ok bool) {
	if rest, found := strings.CutPrefix(id, "sync-"); found {
		id, k[16] = rest, 1
	}
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
		return JobKey{}, false
	}
	h := id[:8] + id[9:13] + id[14:18] + id[19:23] + id[24:]
	if _, err := hex.Decode(k[:16], []byte(h)); err != nil {
		return JobKey{}, false
	}
	return k, true
}

// Jobs is the job engine: the state machine applied to live jobs, their retention, the
// runsync waiters and stream readers, and the workers that hold jobs.
//
// Memory holds an index entry per live job (state, endpoint, expiry), free of pointers but for
// the rarely set extras; the full record lives in the store and is attached only while a worker
// runs the job. A million queued jobs cost a million small entries that the garbage collector
// need not scan, not a million records: status reads pay one store read instead.
type Jobs struct {
	store    JobStore
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

type shard struct {
	mu   sync.Mutex
	jobs map[JobKey]liveJob
	// extras holds the jobExtra of the few jobs that have one (liveJob.hasX), apart from jobs,
	// so that jobs holds no pointers: the garbage collector then never scans the index, which
	// with a million queued jobs made each mark phase over 100 ms long, slowing every request
	// it overlapped (a /run tail that grew with the backlog). nil until a job needs it.
	extras map[JobKey]*jobExtra
}

// jobState is a job's status in the index.
type jobState uint8

const (
	stQueued jobState = iota + 1
	stRunning
	stCompleted
	stFailed
	stCancelled
	stTimedOut
)

var stateNames = [...]JobStatus{stQueued: InQueue, stRunning: InProgress, stCompleted: Completed,
	stFailed: Failed, stCancelled: Cancelled, stTimedOut: TimedOut}

func (s jobState) Status() JobStatus { return stateNames[s] }

func stateOf(s JobStatus) jobState {
	for i, n := range stateNames {
		if n == s && i > 0 {
			return jobState(i)
		}
	}
	return 0
}

// liveJob is a job's index entry, kept by value in its shard's map.
type liveJob struct {
	expiresAt int64  // Unix nanoseconds
	ep        uint32 // interned endpoint id
	state     jobState
	sync      bool // a runsync job: its state changes are not synced
	low       bool // policy.lowPriority: its wait does not scale the endpoint up
	hasX      bool // the job has a jobExtra in its shard's extras (most queued jobs do not)
}

// jobExtra holds what few jobs have at a time.
type jobExtra struct {
	// rec is the full record while a worker runs the job (read it from the store otherwise,
	// with Jobs.record).
	rec *Job
	// hot is the record and input of a queued job while the HotQueueBytes budget allows.
	hot *hotCopy
	// done is closed when the job ends; made only when someone waits.
	done   chan struct{}
	stream *streamState // made when a part arrives or a reader waits
}

// entry is a locked index entry: a copy of the liveJob whose changes unlock writes back.
type entry struct {
	liveJob
	x    *jobExtra // the job's extras, nil for most queued jobs
	key  JobKey
	sh   *shard
	gone bool // removed from the index
}

// entry returns the locked entry of an indexed job, with its extras. The shard is locked.
func (sh *shard) entry(key JobKey, lj liveJob) *entry {
	e := &entry{liveJob: lj, key: key, sh: sh}
	if lj.hasX {
		e.x = sh.extras[key]
	}
	return e
}

// store writes the entry back to the index (or drops its extras when it left the index),
// keeping the shard locked.
func (e *entry) store() {
	if x := e.x; x != nil && x.rec == nil && x.hot == nil && x.done == nil && x.stream == nil {
		e.x = nil
	}
	switch {
	case e.gone || e.x == nil:
		if e.hasX {
			delete(e.sh.extras, e.key)
			e.hasX = false
		}
	default:
		if e.sh.extras == nil {
			e.sh.extras = map[JobKey]*jobExtra{}
		}
		e.sh.extras[e.key] = e.x
		e.hasX = true
	}
	if !e.gone {
		e.sh.jobs[e.key] = e.liveJob
	}
}

func (e *entry) unlock() {
	e.store()
	e.sh.mu.Unlock()
}

func (e *entry) extra() *jobExtra {
	if e.x == nil {
		e.x = &jobExtra{}
	}
	return e.x
}

func (e *entry) status() JobStatus { return e.state.Status() }

// attached is the record attached to a running job, or nil.
func (e *entry) attached() *Job {
	if e.x == nil {
		return nil
	}
	return e.x.rec
}

type hotCopy struct {
	rec   *Job
	input []byte
	size  int64
}

// hotRecordOverhead approximates a record's memory beside its input.
const hotRecordOverhead = 512

// dropHot releases a job's hot copy. The shard is locked.
func (js *Jobs) dropHot(e *entry) {
	if e.x != nil && e.x.hot != nil {
		js.hotBytes.Add(-e.x.hot.size)
		e.x.hot = nil
	}
}

// ended returns a channel closed once the job ends. The shard is locked.
func (e *entry) ended() <-chan struct{} {
	x := e.extra()
	if x.done == nil {
		x.done = make(chan struct{})
		if e.status().Terminal() {
			close(x.done)
		}
	}
	return x.done
}

// wake closes the end channel and signals a stream reader, if there are any. The shard is locked.
func (e *entry) wake() {
	if e.x == nil {
		return
	}
	if e.x.done != nil {
		select {
		case <-e.x.done:
		default:
			close(e.x.done)
		}
	}
	if e.x.stream != nil {
		signal(e.x.stream.sig)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

type endpointCounts struct {
	// First, together, the counts LoadCounter.Load reads on every autoscaler tick.
	inQueue, lowQueued, inProgress atomic.Int64 // lowQueued: lowPriority jobs among inQueue
	submitted                      atomic.Int64 // jobs ever submitted or requeued
	execMs, execCount              atomic.Int64 // execution time of ended jobs
	completed, failed, retried     atomic.Int64
	cond                           atomic.Pointer[Condition]
}

// JobsConfig wires a Jobs engine.
type JobsConfig struct {
	Store    JobStore
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

func (js *Jobs) shard(k JobKey) *shard {
	return &js.shards[(uint16(k[0])<<8|uint16(k[1]))%uint16(len(js.shards))] // the key is random
}

// epIntern returns the endpoint's interned id, adding it if new.
func (js *Jobs) epIntern(name string) uint32 {
	if id, ok := js.epFind(name); ok {
		return id
	}
	js.epMu.Lock()
	defer js.epMu.Unlock()
	if id, ok := js.epIDs[name]; ok {
		return id
	}
	id := uint32(len(js.epNames))
	js.epNames = append(js.epNames, name)
	js.epIDs[name] = id
	return id
}

func (js *Jobs) epFind(name string) (uint32, bool) {
	js.epMu.RLock()
	defer js.epMu.RUnlock()
	id, ok := js.epIDs[name]
	return id, ok
}

func (js *Jobs) epName(id uint32) string {
	js.epMu.RLock()
	defer js.epMu.RUnlock()
	return js.epNames[id]
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
	key := newJobKey(s.Sync)
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

// lookup returns the locked index entry of an endpoint's live job, or KindNotFound when it is
// unknown, expired or another endpoint's. Call unlock on the entry when done.
func (js *Jobs) lookup(endpoint, id string) (*entry, error) {
	key, ok := ParseJobKey(id)
	epID, known := js.epFind(endpoint)
	if !ok || !known {
		return nil, notFound(id)
	}
	e := js.lock(key)
	if e == nil || e.ep != epID || js.clock.Now().UnixNano() >= e.expiresAt {
		if e != nil {
			e.sh.mu.Unlock()
		}
		return nil, notFound(id)
	}
	return e, nil
}

// lookupRef is lookup that also checks the job's owner (see JobRef) without taking the record
// from the entry: the attached record or hot copy answers when there is one, else the store.
func (js *Jobs) lookupRef(ref JobRef) (*entry, error) {
	e, err := js.lookup(ref.Endpoint, ref.ID)
	if err != nil || ref.Owner == "" {
		return e, err
	}
	owner := ""
	switch {
	case e.attached() != nil:
		owner = e.attached().Owner
	case e.x != nil && e.x.hot != nil:
		owner = e.x.hot.rec.Owner
	default:
		rec, err := js.store.GetJob(ref.ID)
		if err != nil {
			e.unlock()
			return nil, Internal("reading the job", err)
		}
		owner = rec.Owner
	}
	if owner != ref.Owner {
		e.unlock()
		return nil, notFound(ref.ID)
	}
	return e, nil
}

// owned checks a record read under the entry's lock against the ref's owner.
func owned(ref JobRef, rec *Job) error {
	if ref.Owner != "" && rec.Owner != ref.Owner {
		return notFound(ref.ID)
	}
	return nil
}

// lock returns the locked entry of a key, or nil (unlocked) when there is none.
func (js *Jobs) lock(key JobKey) *entry {
	sh := js.shard(key)
	sh.mu.Lock()
	lj, ok := sh.jobs[key]
	if !ok {
		sh.mu.Unlock()
		return nil
	}
	return sh.entry(key, lj)
}

// record returns the job's full record: the attached one, the hot copy (which it hands over:
// the caller may change the record, so the copy would go stale), or one read from the store.
// The shard is locked.
func (js *Jobs) record(e *entry) (*Job, error) {
	if rec := e.attached(); rec != nil {
		return rec, nil
	}
	if e.x != nil && e.x.hot != nil {
		rec := e.x.hot.rec
		js.dropHot(e)
		return rec, nil
	}
	rec, err := js.store.GetJob(e.key.String())
	if err != nil {
		return nil, Internal("reading the job", err)
	}
	return rec, nil
}

// save writes the record without waiting for the disk and refreshes the index entry. The shard
// is locked, so one job's writes land in order; operations that must be durable call sync once
// unlocked.
func (js *Jobs) save(e *entry, rec *Job) {
	e.state, e.expiresAt = stateOf(rec.Status), rec.ExpiresAt.UnixNano()
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
	url, endpoint, endedAt := rec.Webhook, rec.Endpoint, rec.EndedAt
	go func() {
		// The end was written (save) before this ran: once it is on disk, a crash cannot
		// take the job back to a state that would end it, and webhook it, a second time.
		if js.sync(true) != nil {
			return
		}
		if in, err := js.store.Input(body.ID); err == nil {
			body.Input = in
		}
		b, err := json.Marshal(body)
		if err != nil {
			js.log.Error("encoding a webhook", "job", body.ID, "err", err)
			return
		}
		if !js.notify.Notify(url, b, func() { js.webhookDelivered(endpoint, body.ID, endedAt) }) {
			js.deferWebhook(endpoint, body.ID, endedAt)
		}
	}()
}

// webhookDelivered clears the delivery mark of the job's end at endedAt (not of a later end,
// after a retry). The write is not synced: a crash before it only delivers the webhook again.
func (js *Jobs) webhookDelivered(endpoint, id string, endedAt time.Time) {
	e, err := js.lookup(endpoint, id)
	if err != nil {
		return // expired meanwhile
	}
	defer e.unlock()
	if !e.status().Terminal() {
		return // retried meanwhile: its next end marks it again
	}
	rec, err := js.record(e)
	if err != nil || !rec.WebhookPending || !rec.EndedAt.Equal(endedAt) {
		return
	}
	rec.WebhookPending = false
	js.save(e, rec)
}
