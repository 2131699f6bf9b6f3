package core

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// JobStore is the truth about jobs that every replica shares: records and inputs, queue order,
// which worker holds which job, worker heartbeats, unread stream chunks, and the wake-ups that
// tell parked takers, runsync waiters and stream readers that something changed.
//
// Core keeps the rules (the transition table, retention, ttl, webhooks, metering); the store
// applies each change atomically and only from the states core allows, so that of two racing
// changes (a late post and a cancel, two replicas taking) exactly one wins.
//
// The embedded store (store/memq over Pebble's records) keeps a pointer-free index and hot
// copies of queued jobs in memory. A shared store (PostgreSQL) takes with FOR UPDATE SKIP
// LOCKED and wakes with LISTEN/NOTIFY. store/storetest.RunJobStore is the suite every
// implementation runs.
//
// Ids are those JobKey.String makes. Times are compared with time.Time.Equal.
type JobStore interface {
	// Insert stores a new IN_QUEUE job with its input, queues it behind the endpoint's other
	// jobs, and returns the record stored: Seq set, which orders jobs by insertion. With
	// durable the job is on disk before Insert returns (an acknowledged /run survives kill -9);
	// without (runsync, whose client waits on the connection) a crash may lose it, and a
	// store that is an InputKeeper may keep a runsync job's input in memory only. The store
	// may keep input: the caller must not change it afterwards.
	Insert(ctx context.Context, rec Job, input []byte, durable bool) (Job, error)

	// Take moves up to max of the endpoint's queued jobs, oldest first, IN_PROGRESS for worker
	// at now (WorkerID and StartedAt set, Output cleared) and returns them with their inputs.
	// A job is taken by one caller only, however many take at once. Jobs past ExpiresAt are
	// not taken. Take does not wait: with none queued it returns none (see WaitAvailable).
	// A take counts as the worker's heartbeat.
	Take(ctx context.Context, endpoint, worker string, max int, now time.Time) ([]TakenJob, error)

	// Update applies change to the job if its status is in from, and stores the result (on
	// disk before Update returns with durable). Otherwise it returns a *StateError holding the
	// status found, and nothing changes: this is how a late post can never overwrite a
	// terminal state. change must only change the job it is given: it must not call the store
	// or have other effects, because a store may run it more than once (the PostgreSQL store
	// retries it when a concurrent write won; the in-process store runs it once, under the
	// job's lock). An error from it aborts the update and is returned as is. A change to IN_QUEUE queues the job
	// again, at the back; a change to IN_PROGRESS is refused (that is Take's), as is a change
	// of ID, Endpoint, Owner or Seq. ErrNotFound when there is no such job.
	Update(ctx context.Context, id string, from StatusSet, change func(*Job) error, durable bool) (Job, error)

	// Get returns a job's record; ErrNotFound when there is none. An expired job may still be
	// returned until Expire removes it: callers check ExpiresAt.
	Get(ctx context.Context, id string) (Job, error)
	// Input returns a job's input; ErrNotFound when there is none.
	Input(ctx context.Context, id string) ([]byte, error)

	// List returns jobs newest first (by Seq) that match the filter, up to its Limit, and the
	// cursor of the next page ("" = no more). A cursor it did not hand out is an error that
	// wraps ErrBadCursor (the job list answers it 422, not 500).
	List(ctx context.Context, f JobFilter) ([]Job, string, error)

	// Purge applies change to every queued job of the endpoint that owner submitted ("" = any
	// owner), each under its lock, as Update would from IN_QUEUE; change must take the job out
	// of the queue. It returns how many jobs it changed, on disk on return with durable.
	Purge(ctx context.Context, endpoint, owner string, change func(*Job), durable bool) (int, error)

	// Expire removes the jobs whose ExpiresAt is at or before now, with their inputs and
	// stream chunks, and returns what was removed. Waiters of a removed job wake.
	Expire(ctx context.Context, now time.Time) ([]ExpiredJob, error)
	// Overdue returns the ids of IN_PROGRESS jobs whose execution timeout (TimeoutMs > 0 from
	// StartedAt) has passed at now. It changes nothing: core times them out with Update.
	Overdue(ctx context.Context, now time.Time) ([]string, error)

	// AppendChunks adds stream chunks to an IN_PROGRESS job that worker holds and marks the
	// job Streamed; otherwise a *StateError (or ErrNotFound). It returns the bytes now unread.
	AppendChunks(ctx context.Context, id, worker string, chunks []StreamChunk) (int, error)
	// DrainChunks hands out the job's unread chunks, with their Seq; each chunk is handed out
	// once. Chunks stay after the job ends, until drained or the job is queued again or
	// removed. Drained chunks stay readable to PeekChunks: the newest of them within
	// MaxStreamKept bytes and MaxStreamKeptParts chunks (at least the last one), until the job
	// is queued again or removed.
	DrainChunks(ctx context.Context, id string) ([]StreamChunk, error)
	// PeekChunks returns the job's chunks with a Seq above after, drained ones still kept
	// and unread ones alike, in order, and changes nothing: it hands nothing out.
	PeekChunks(ctx context.Context, id string, after int64) ([]StreamChunk, error)

	// Held returns the ids of the IN_PROGRESS jobs that worker holds.
	Held(ctx context.Context, worker string) ([]string, error)
	// Heartbeat records that worker was alive at.
	Heartbeat(ctx context.Context, worker string, at time.Time) error
	// Silent returns the workers that hold a job and whose last heartbeat (or take) is before
	// before: they are lost, and core takes their jobs back.
	Silent(ctx context.Context, before time.Time) ([]string, error)
	// ForgetWorker drops a worker's heartbeat; the jobs it holds are untouched.
	ForgetWorker(ctx context.Context, worker string) error

	// Stats returns the endpoint's figures for the autoscaler and /health; "" = the totals of
	// every endpoint.
	Stats(ctx context.Context, endpoint string) (QueueStats, error)

	// WaitAvailable returns nil at once when the endpoint has a queued job, else once one may
	// have been queued (an insert, or a job queued again; a wake-up may be spurious), or
	// ctx.Err() when ctx ends first. Parked takers call it between Takes.
	WaitAvailable(ctx context.Context, endpoint string) error
	// WaitEnded returns nil at once when the job has ended (a terminal status) or is gone,
	// else once it ends, or ctx.Err() when ctx ends first. Runsync waiters call it.
	WaitEnded(ctx context.Context, id string) error
	// WaitChunks is WaitEnded that also returns when the job holds unread stream chunks.
	// Stream readers call it between DrainChunks.
	WaitChunks(ctx context.Context, id string) error
	// ListenAvailable subscribes fn, and returns once it is subscribed (an error when it
	// cannot be). From then until ctx ends, fn is called with the endpoint each time a job may
	// have become available there (an insert, or a job queued again); calls may be coalesced,
	// but none is lost. The scheduler's demand listens: an endpoint with no worker starts one
	// at once. fn must not block; it may be called from the inserting goroutine.
	ListenAvailable(ctx context.Context, fn func(endpoint string)) error
}

// CountingStore is what an in-process JobStore may offer beside Stats: it keeps its state
// counts in the endpoint's Counters, which the engine shares for its own counts, so that the
// autoscaler reads every endpoint's figures on every tick from one struct and looks nothing
// up. oldest returns when the endpoint's oldest queued job that may scale it up was queued
// (zero when none; see QueueStats.OldestQueuedAt). A shared store need not offer it: its
// figures come from Stats.
type CountingStore interface {
	Counters(endpoint string) (c *Counters, oldest func() time.Time)
}

// EndpointStats is what a shared JobStore may offer beside Stats: a reader of one endpoint's
// figures that looks nothing up each time (the PostgreSQL store refreshes every endpoint's
// figures at once, at most so old), for the autoscaler, which reads every endpoint's on every
// tick. An in-process store offers CountingStore instead.
type EndpointStats interface {
	EndpointStats(endpoint string) func() QueueStats
}

// InputKeeper is what a JobStore may offer for runsync jobs (Job.Sync) inserted without
// durable: it keeps such a job's input in memory only while its runsync waits, so that a large
// body is held once, not again in the store's write buffers. The input is stored when the job
// ends FAILED or TIMED_OUT (a retry runs it again) or with a webhook (which carries it), and
// by KeepInput. A crash before either loses the job, which its caller never got an answer for;
// the store deletes it when it opens again.
type InputKeeper interface {
	// KeepInput stores, and syncs, the job's input if the store holds it in memory only: the
	// runsync's wait ended before the job did, so the job must outlive it. Nothing is done
	// for a job whose input is stored already, or that ended or is gone.
	KeepInput(ctx context.Context, id string) error
}

// Counters are one endpoint's job counts in one place: a CountingStore counts its live jobs
// by state, the engine counts what it did. The fields the autoscaler reads on every tick come
// first, in one cache line.
type Counters struct {
	// Kept by the store: live jobs by state (Queued includes LowQueued).
	Queued, LowQueued, InProgress atomic.Int64
	// Kept by the engine: jobs that ever entered IN_QUEUE (submits, retries, requeues), and
	// the execution time of the jobs that left IN_PROGRESS.
	Submitted, ExecMs, ExecCount atomic.Int64
	cond                         atomic.Pointer[Condition] // the scheduler's, for /health
	_                            [8]byte
	// Kept by the store: ended jobs kept for their retention (Failed counts TIMED_OUT).
	Completed, Failed atomic.Int64
	Retried           atomic.Int64 // kept by the engine
	_                 [40]byte     // a whole second cache line: a Counters allocated alone is 128-byte aligned
}

// TakenJob is a job Take moved IN_PROGRESS, with its input.
type TakenJob struct {
	Job   Job
	Input []byte
}

// JobFilter selects jobs for JobStore.List.
type JobFilter struct {
	Endpoint string    // "" = every endpoint
	Owner    string    // "" = any owner
	Status   StatusSet // 0 = any status
	// WebhookPending keeps only the jobs whose webhook is still to be delivered.
	WebhookPending bool
	Cursor         string // from the previous page; "" = the newest
	Limit          int    // jobs per page; <= 0 = all
}

// ExpiredJob is a job Expire removed.
type ExpiredJob struct {
	ID, Endpoint, WorkerID string
	Status                 JobStatus
	LowPriority            bool
}

// QueueStats are an endpoint's job figures: how many of its live jobs are in each state.
type QueueStats struct {
	Queued, LowQueued int64 // IN_QUEUE jobs; LowQueued: those with policy.lowPriority
	InProgress        int64
	Completed, Failed int64 // ended jobs kept for their retention; Failed counts TIMED_OUT too
	// OldestQueuedAt is when the oldest queued job that may scale the endpoint up (not
	// lowPriority) was queued; zero when none. A store may look only so far down a queue
	// of lowPriority jobs, and answer zero past that.
	OldestQueuedAt time.Time
}

// StatusSet is a set of job statuses.
type StatusSet uint8

// Statuses returns the set of the given statuses.
func Statuses(s ...JobStatus) StatusSet {
	var set StatusSet
	for _, st := range s {
		set |= statusBit(st)
	}
	return set
}

// Has reports whether s is in the set.
func (set StatusSet) Has(s JobStatus) bool { return set&statusBit(s) != 0 }

func statusBit(s JobStatus) StatusSet {
	switch s {
	case InQueue:
		return 1
	case InProgress:
		return 2
	case Completed:
		return 4
	case Failed:
		return 8
	case Cancelled:
		return 16
	case TimedOut:
		return 32
	}
	return 0
}

// From returns the statuses the transition table allows ev from.
func From(ev Event) StatusSet {
	var set StatusSet
	for from, evs := range Transitions {
		if _, ok := evs[ev]; ok {
			set |= statusBit(from)
		}
	}
	return set
}

// StateError is a JobStore's refusal of a change from a status it was not allowed from.
type StateError struct {
	ID     string
	Status JobStatus // the status found
}

func (e *StateError) Error() string {
	return fmt.Sprintf("job %s is %s: the change is not allowed from there", e.ID, e.Status)
}

// SharedWorkers is what a shared JobStore (PostgreSQL) offers so that replicas agree about
// workers. A worker is registered by one replica (the leader, whose scheduler started it) but
// may poll, post and ping through any (a load balancer in front of the replicas): what another
// replica hears is noted in the store, and the registering replica merges it, with the jobs the
// worker holds and its heartbeat, into its own view about once a second. The leader's worker
// figures for /health are published the same way, so that every replica's /health is right.
//
// The embedded store offers none of it: its one replica registers every worker and hears all
// of them. The engine finds the interface by a type assertion.
type SharedWorkers interface {
	// NoteWorker records what this replica heard from a worker it did not register: a
	// contact, a poll (the poll count goes up), a stopPod, an unhealthy reason. Notes only
	// add: a stopPod or a reason stays set, and at is kept as the last poll's time.
	NoteWorker(ctx context.Context, worker string, n WorkerNote, at time.Time) error
	// SharedActivity returns what the store knows of those of workers that another replica
	// noted: the notes, the jobs each holds (IN_PROGRESS, taken through any replica) and its
	// last heartbeat. Workers with no note are left out. One round trip for all of them.
	SharedActivity(ctx context.Context, workers []string) ([]SharedActivity, error)
	// PublishFigures stores endpoints' worker figures as the leader of epoch sees them. A
	// write of an older epoch than the one stored for an endpoint changes nothing (a deposed
	// leader's late write), and an empty list still records the epoch.
	PublishFigures(ctx context.Context, epoch int64, figures map[string]WorkerFigures) error
	// ReadFigures returns the figures the newest epoch's leader published, by endpoint;
	// endpoints published by an older epoch only are left out.
	ReadFigures(ctx context.Context) (map[string]WorkerFigures, error)
}

// WorkerNote is what a replica heard from a worker it did not register.
type WorkerNote struct {
	Polled    bool   // it polled for a job
	StopPod   bool   // its last job asked for the worker to be recycled
	Unhealthy string // the reason it reported itself unhealthy; "" = none
}

// SharedActivity is what the store knows of a worker that another replica heard from.
type SharedActivity struct {
	Worker    string
	Polls     int64     // polls noted so far; a larger count than last read means it polled again
	PolledAt  time.Time // the last noted poll; zero = none
	StopPod   bool
	Unhealthy string
	Held      []string  // the jobs it holds, through whichever replica it took them
	Seen      time.Time // its last heartbeat in the store; zero = none
}

// WorkerFigures are an endpoint's worker figures on /health (Health's worker half), as the
// leader's scheduler and job engine see them.
type WorkerFigures struct {
	Idle, Running, Initializing, Unhealthy int
	Throttled, Suspended                   int
	UnhealthyReasons                       []string `json:",omitempty"`
	Reason                                 string   `json:",omitempty"`
	ColdStarts                             int64
	ColdStartLast, ColdStartTotal          time.Duration
}
