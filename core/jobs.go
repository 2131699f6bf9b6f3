package core

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// WorkerLostAfter is how long a worker may stay silent (no poll, ping or post) before its jobs
// are taken back.
const WorkerLostAfter = 30 * time.Second

// MaxStreamBacklog is how many bytes of stream chunks a job may hold unread; past it the job
// fails rather than grow without bound.
const MaxStreamBacklog = 64 << 20

// Jobs is the job engine: the rules applied to jobs (the transition table, retention, ttl,
// webhooks, metering), the runsync waiters and stream readers, and the workers of this replica.
// The jobs themselves live in a JobStore, which applies each change only from the states the
// rules allow and wakes waiters; Jobs keeps no job in memory.
type Jobs struct {
	store  JobStore
	notify Notifier
	meter  Meter
	usage  UsageStore
	// history gathers the jobs that end here for the endpoints' history (history.go); nil =
	// none is kept.
	history *historyRecorder
	clock   Clock
	log     *slog.Logger

	workers workerRegistry // the workers registered here, under a lock per shard (workers.go)
	tokens  *WorkerTokens
	// draining: the server is stopping; Take hands out nothing (jobs_drain.go).
	draining atomic.Bool
	signals  WorkerSignals // to the scheduler: workers ready and lost (workersignals.go)
	observe  JobObserver   // nil = none

	counts sync.Map // endpoint -> *counters

	webhookBacklog webhookBacklog // webhooks the notifier had no room for (jobs_webhook.go)

	shared *shared // workers shared with other replicas (jobs_shared.go); nil = none

	// When Tick last looked for silent workers, here and in the store (Tick is never called
	// concurrently with itself).
	lastSilentCheck, lastStoreSilentCheck time.Time
}

// JobsConfig wires a Jobs engine.
type JobsConfig struct {
	// Store holds the jobs; opened (and its stored jobs loaded) before the engine starts.
	Store  JobStore
	Notify Notifier // nil = webhooks are not delivered
	// Meter prices the jobs of metered endpoints (ready-made models) when they complete, and
	// Usage records each charge; both or neither. nil = nothing is metered.
	Meter Meter
	Usage UsageStore
	// History keeps the endpoints' per-minute history of ended jobs (see History); nil =
	// none is kept. Call RunHistory to store what ends.
	History HistoryStore
	Clock   Clock
	Log     *slog.Logger
	// Tokens issues and checks worker tokens. nil = a key of this process's own, with
	// revocations in its memory: tokens die with the process (tests and one-process rigs).
	Tokens *WorkerTokens
	// Observer hears of jobs taken and ended (metrics, traces); nil = none.
	Observer JobObserver
}

// NewJobs returns an engine over the store; call Recover once to apply the restart rules to
// the jobs it holds.
func NewJobs(c JobsConfig) *Jobs {
	if (c.Meter == nil) != (c.Usage == nil) {
		panic("core: JobsConfig needs both Meter and Usage, or neither")
	}
	j := &Jobs{store: c.Store, notify: c.Notify, meter: c.Meter, usage: c.Usage, clock: c.Clock, log: c.Log,
		tokens: c.Tokens, observe: c.Observer, signals: WorkerSignals{ready: make(chan struct{}, 1)}}
	if c.History != nil {
		j.history = &historyRecorder{store: c.History}
	}
	j.workers.init()
	if j.tokens == nil {
		j.tokens = newMemoryWorkerTokens(c.Clock)
	}
	j.shared = newShared(c.Store)
	if j.log == nil {
		j.log = slog.Default()
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

// Submit creates a job IN_QUEUE in the store, which queues it and wakes a taker. An async job
// is durable before Submit returns; a runsync job is not synced first (its client waits on
// the connection).
func (js *Jobs) Submit(ctx context.Context, ep *Endpoint, s Submission) (Job, error) {
	now := js.clock.Now()
	rec := Job{
		ID: NewJobKey(s.Sync).String(), Endpoint: ep.ID, Owner: cmp.Or(s.Owner, ep.Owner), Status: InQueue, Sync: s.Sync,
		Webhook: s.Webhook, Policy: s.Policy, S3Config: s.S3Config,
		TimeoutMs: cmp.Or(s.Policy.ExecutionTimeoutMs, ep.TimeoutMs),
		CreatedAt: now, QueuedAt: now,
		Retention: RunRetention,
	}
	if s.Sync {
		rec.Retention = RunSyncRetention
		if s.Wait >= LongWait {
			rec.Retention = RunSyncLongRetention
		}
	}
	rec.ExpiresAt = now.Add(ttlOf(&rec))
	stored, err := js.store.Insert(ctx, rec, s.Input, !s.Sync)
	if err != nil {
		return Job{}, Internal("storing the job", err)
	}
	js.countsOf(ep.ID).Submitted.Add(1)
	if js.observe != nil {
		js.observe.JobSubmitted(ctx, stored.Endpoint, stored.ID)
	}
	return stored, nil
}

// ttlOf is a job's lifetime from submit.
func ttlOf(j *Job) time.Duration {
	if j.Policy.TTLMs > 0 {
		return time.Duration(j.Policy.TTLMs) * time.Millisecond
	}
	return DefaultJobTTL
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

// anyStatus is every job status.
var anyStatus = Statuses(InQueue, InProgress, Completed, Failed, Cancelled, TimedOut)

// isSync reports whether id is a runsync job's: its changes are not synced (its client waits
// on the connection).
func isSync(id string) bool { return strings.HasPrefix(id, "sync-") }

// check returns KindNotFound unless the job is the ref's endpoint's and owner's (when set), and
// not expired at now.
func check(ref JobRef, j *Job, now time.Time) error {
	if j.Endpoint != ref.Endpoint || (ref.Owner != "" && j.Owner != ref.Owner) || !now.Before(j.ExpiresAt) {
		return notFound(ref.ID)
	}
	return nil
}

// read returns the job the ref names, as the ref's caller may see it.
func (js *Jobs) read(ctx context.Context, ref JobRef) (Job, error) {
	if _, ok := ParseJobKey(ref.ID); !ok {
		return Job{}, notFound(ref.ID)
	}
	j, err := js.store.Get(ctx, ref.ID)
	switch {
	case errors.Is(err, ErrNotFound):
		return Job{}, notFound(ref.ID)
	case err != nil:
		return Job{}, Internal("reading the job", err)
	}
	if err := check(ref, &j, js.clock.Now()); err != nil {
		return Job{}, err
	}
	return j, nil
}

// apply changes the job the ref names by ev, if the transition table allows it from the job's
// status: fn sets the fields of the state ev leads to. It returns the job as stored and the
// status it left.
func (js *Jobs) apply(ctx context.Context, ref JobRef, ev Event, durable bool, fn func(j *Job, to JobStatus, now time.Time)) (Job, JobStatus, error) {
	now := js.clock.Now()
	var from JobStatus
	j, err := js.store.Update(ctx, ref.ID, From(ev), func(j *Job) error {
		if err := check(ref, j, now); err != nil {
			return err
		}
		to, err := Next(j.Status, ev)
		if err != nil {
			return err
		}
		from = j.Status
		fn(j, to, now)
		return nil
	}, durable)
	if err != nil {
		return Job{}, "", js.refused(ctx, ref, ev, err)
	}
	return j, from, nil
}

// refused turns a store's refusal into the caller's error: a job the ref may not see is not
// found, whatever its state; one in a state ev is not allowed from is a conflict naming why.
func (js *Jobs) refused(ctx context.Context, ref JobRef, ev Event, err error) error {
	var se *StateError
	var ours *Error
	switch {
	case errors.As(err, &se):
		if _, err := js.read(ctx, ref); err != nil {
			return err
		}
		_, err := Next(se.Status, ev)
		return err
	case errors.Is(err, ErrNotFound):
		return notFound(ref.ID)
	case errors.As(err, &ours):
		return err
	}
	return Internal("storing the job", err)
}

// ending applies the end rule to a job reaching terminal state to at now: its result is kept
// for its retention, and the webhook is marked for delivery with the end (a crash before the
// delivery loses nothing).
func (js *Jobs) ending(j *Job, to JobStatus, now time.Time) {
	j.Status, j.EndedAt, j.ExpiresAt = to, now, now.Add(j.Retention)
	j.WebhookPending = j.Webhook != "" && js.notify != nil && (to == Completed || to == Failed || to == TimedOut)
}

// ended follows a job's end once the store holds it: its execution time counts, its worker no
// longer holds it (and is told to stop a job cancelled or timed out under it), and the webhook
// goes out (detached from ctx: see sendWebhook).
func (js *Jobs) ended(ctx context.Context, j *Job, from JobStatus, ev Event) {
	if js.observe != nil {
		js.observe.JobEnded(j, from)
	}
	js.history.record(j)
	if from == InProgress && !j.StartedAt.IsZero() {
		c := js.countsOf(j.Endpoint)
		c.ExecMs.Add(j.EndedAt.Sub(j.StartedAt).Milliseconds())
		c.ExecCount.Add(1)
	}
	if j.WorkerID != "" && from == InProgress {
		js.release(j.WorkerID, j.ID, ev == EvCancel || ev == EvTimeout)
	}
	if j.WebhookPending {
		js.sendWebhook(ctx, j)
	}
}

// requeueing puts a job back IN_QUEUE at now (retry, worker lost, or a graceful stop's
// release); spend counts one more retry (a release spends none). The store queues it again.
func requeueing(j *Job, now time.Time, spend bool) {
	j.Status = InQueue
	j.Output, j.Error, j.WorkerID, j.Cost = nil, "", "", nil
	if spend {
		j.Retries++
	}
	j.QueuedAt, j.StartedAt, j.EndedAt = now, time.Time{}, time.Time{}
	j.ExpiresAt = now.Add(ttlOf(j))
}

// view returns the job with the scheduler's reason for a queued one's wait.
func (js *Jobs) view(ctx context.Context, j Job) Job {
	if j.Status == InQueue {
		j.Reason = js.condition(ctx, j.Endpoint).Reason
	}
	return j
}

// Get returns a job. A positive ttl sets the job to expire ttl from now.
func (js *Jobs) Get(ctx context.Context, ref JobRef, ttl time.Duration) (Job, error) {
	if ttl <= 0 {
		j, err := js.read(ctx, ref)
		return js.view(ctx, j), err
	}
	now := js.clock.Now()
	j, err := js.store.Update(ctx, ref.ID, anyStatus, func(j *Job) error {
		if err := check(ref, j, now); err != nil {
			return err
		}
		j.ExpiresAt = now.Add(ttl)
		return nil
	}, false)
	if err != nil {
		return Job{}, js.refused(ctx, ref, "", err)
	}
	return js.view(ctx, j), nil
}

// Wait returns the job once it ends or when wait passes (or ctx ends), whichever is first.
func (js *Jobs) Wait(ctx context.Context, ref JobRef, wait time.Duration) (Job, error) {
	if _, err := js.read(ctx, ref); err != nil {
		return Job{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	_ = js.store.WaitEnded(wctx, ref.ID) // its end, the wait, or the caller's context
	cancel()
	if ctx.Err() != nil {
		// The caller left: the job outlives its wait, and a runsync job's input must still be
		// stored (keepInput), so the reads below must not fail for the ended context. Only
		// an abandoned wait pays WithoutCancel's small allocation.
		ctx = context.WithoutCancel(ctx)
	}
	j, err := js.Get(ctx, ref, 0)
	if err == nil && isSync(j.ID) && !j.Status.Terminal() {
		js.keepInput(ctx, j.ID) // a runsync job outlives its wait: its input is stored now
	}
	return j, err
}

// keepInput stores a runsync job's input that the store kept in memory (InputKeeper).
func (js *Jobs) keepInput(ctx context.Context, id string) {
	if k, ok := js.store.(InputKeeper); ok {
		if err := k.KeepInput(ctx, id); err != nil {
			js.log.Error("storing a runsync job's input", "job", id, "err", err)
		}
	}
}

// Cancel cancels a queued or running job; a running job's worker is told to stop.
func (js *Jobs) Cancel(ctx context.Context, ref JobRef) (Job, error) {
	// A cancel once received is carried out even if its caller leaves: a client that gave up
	// waiting for the answer must not find the job half-cancelled (a PostgreSQL write rolled
	// back by the cancelled request). The context's values (its trace) are kept.
	ctx = context.WithoutCancel(ctx)
	j, from, err := js.apply(ctx, ref, EvCancel, !isSync(ref.ID), func(j *Job, to JobStatus, now time.Time) {
		js.ending(j, to, now)
	})
	if err != nil {
		return Job{}, err
	}
	js.ended(ctx, &j, from, EvCancel)
	return js.view(ctx, j), nil
}

// Retry puts a FAILED or TIMED_OUT job back in the queue: same id, same input, output removed.
func (js *Jobs) Retry(ctx context.Context, ref JobRef) (Job, error) {
	j, _, err := js.apply(ctx, ref, EvRetry, !isSync(ref.ID), func(j *Job, _ JobStatus, now time.Time) {
		requeueing(j, now, true)
	})
	if err != nil {
		return Job{}, err
	}
	c := js.countsOf(ref.Endpoint)
	c.Retried.Add(1)
	c.Submitted.Add(1)
	return js.view(ctx, j), nil
}

// Purge cancels every queued job of the endpoint; running jobs are not touched.
func (js *Jobs) Purge(ctx context.Context, endpoint string) int {
	return js.PurgeOwned(ctx, endpoint, "")
}

// PurgeOwned cancels the endpoint's queued jobs that owner submitted ("" = every owner's), as
// purge-queue on a shared ready-made model endpoint does; running jobs are not touched.
func (js *Jobs) PurgeOwned(ctx context.Context, endpoint, owner string) int {
	now := js.clock.Now()
	n, err := js.store.Purge(ctx, endpoint, owner, func(j *Job) {
		j.Error = "purged from the queue"
		js.ending(j, Cancelled, now)
	}, true)
	if err != nil {
		js.log.Error("purging a queue", "endpoint", endpoint, "err", err) // what was purged stays purged
	}
	return n
}
