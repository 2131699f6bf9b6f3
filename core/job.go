package core

import (
	"encoding/json"
	"fmt"
	"time"
)

// JobStatus is a job's state (spec 3).
type JobStatus string

// Job states.
const (
	InQueue    JobStatus = "IN_QUEUE"
	InProgress JobStatus = "IN_PROGRESS"
	Completed  JobStatus = "COMPLETED"
	Failed     JobStatus = "FAILED"
	Cancelled  JobStatus = "CANCELLED"
	TimedOut   JobStatus = "TIMED_OUT"
)

// Terminal reports whether the state is final (until a retry, for FAILED and TIMED_OUT).
func (s JobStatus) Terminal() bool {
	return s == Completed || s == Failed || s == Cancelled || s == TimedOut
}

// Event is what happens to a job.
type Event string

// Job events.
const (
	EvTake     Event = "take"     // a worker takes the job
	EvDone     Event = "done"     // the worker reports output
	EvFail     Event = "fail"     // the worker reports an error, or its result is refused
	EvProgress Event = "progress" // the worker reports progress; the job keeps running
	EvCancel   Event = "cancel"   // the caller cancels
	EvPurge    Event = "purge"    // the caller purges the queue
	EvTimeout  Event = "timeout"  // the execution timeout passes
	EvRequeue  Event = "requeue"  // the worker was lost, retries remain
	EvLost     Event = "lost"     // the worker was lost, no retries remain
	EvRelease  Event = "release"  // the server stops gracefully: back to the queue, no retry spent
	EvRetry    Event = "retry"    // the caller retries a failed or timed-out job
)

// Transitions is the job state machine: from -> event -> to. Anything not listed is refused,
// so terminal states are sticky: a late done, progress or stream post, a cancel of a finished
// job or a retry of one that did not fail changes nothing. docs/api.md (Job states) shows this table.
var Transitions = map[JobStatus]map[Event]JobStatus{
	InQueue: {
		EvTake:   InProgress,
		EvCancel: Cancelled,
		EvPurge:  Cancelled,
	},
	InProgress: {
		EvDone:     Completed,
		EvFail:     Failed,
		EvProgress: InProgress,
		EvCancel:   Cancelled,
		EvTimeout:  TimedOut,
		EvRequeue:  InQueue,
		EvLost:     Failed,
		EvRelease:  InQueue,
	},
	Failed:   {EvRetry: InQueue},
	TimedOut: {EvRetry: InQueue},
}

// Next returns the state after ev, or a KindConflict error naming why not.
func Next(from JobStatus, ev Event) (JobStatus, error) {
	if to, ok := Transitions[from][ev]; ok {
		return to, nil
	}
	switch ev {
	case EvRetry:
		return from, Errorf(KindConflict, "only a FAILED or TIMED_OUT job can be retried; this job is %s", from)
	case EvCancel:
		return from, Errorf(KindConflict, "the job is %s and can no longer be cancelled", from)
	}
	return from, Errorf(KindConflict, "the job is %s: %s is not possible", from, ev)
}

// JobPolicy is the per-job policy of a request (RunPod's `policy`).
type JobPolicy struct {
	ExecutionTimeoutMs int64 `json:"executionTimeout,omitempty"` // 0 = the endpoint's timeout
	LowPriority        bool  `json:"lowPriority,omitempty"`
	TTLMs              int64 `json:"ttl,omitempty"` // lifetime from submit; 0 = DefaultJobTTL
}

// Job limits and retention (spec 4.3, 8; notes/runpod-compat.md).
const (
	DefaultJobTTL        = 24 * time.Hour   // lifetime of a job from submit unless policy.ttl
	RunRetention         = 30 * time.Minute // result kept after a /run job ends
	RunSyncRetention     = time.Minute      // after a /runsync job ends
	RunSyncLongRetention = 5 * time.Minute  // after a /runsync job with a long wait ends
	LongWait             = 60 * time.Second // a runsync wait at least this long keeps results longer
	MaxStreamChunk       = 1 << 20          // bytes per stream chunk handed out
	MaxResult            = 20 << 20         // bytes of output a job may produce
	RetryBudget          = 3                // worker losses a job survives before FAILED
)

// Job is a job's record. Input is kept apart (JobRecords.Input), so records stay small.
type Job struct {
	ID        string          `json:"id"`
	Endpoint  string          `json:"endpoint"`
	Owner     string          `json:"owner"`
	Status    JobStatus       `json:"status"`
	Sync      bool            `json:"sync,omitempty"` // submitted by runsync
	Webhook   string          `json:"webhook,omitempty"`
	Policy    JobPolicy       `json:"policy"`
	TimeoutMs int64           `json:"timeoutMs"` // execution timeout in force
	S3Config  json.RawMessage `json:"s3Config,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"` // final output, or the last progress value
	Error     string          `json:"error,omitempty"`
	Retries   int             `json:"retries"` // worker losses and caller retries so far
	WorkerID  string          `json:"workerId,omitempty"`
	Seq       uint64          `json:"seq"` // queue order
	Streamed  bool            `json:"streamed,omitempty"`
	// WebhookPending marks an ended job whose webhook has not been delivered (or given up
	// on) yet; Recover sends it again after a restart.
	WebhookPending bool          `json:"webhookPending,omitempty"`
	CreatedAt      time.Time     `json:"createdAt"`
	QueuedAt       time.Time     `json:"queuedAt"`  // last entry into IN_QUEUE
	StartedAt      time.Time     `json:"startedAt"` // last take
	EndedAt        time.Time     `json:"endedAt"`
	Retention      time.Duration `json:"retention"` // how long the result is kept after the end
	ExpiresAt      time.Time     `json:"expiresAt"` // when the job is removed
	// Cost is what a COMPLETED job of a ready-made model was charged; nil for every other job.
	Cost *Charge `json:"cost,omitempty"`
	// Reason says why a queued job waits when its endpoint cannot run it (workers crash-loop,
	// no pool has room). Not stored: the scheduler's current view, set on reads.
	Reason string `json:"-"`
}

// DelayTime is the time the job waited in the queue before its last take, in milliseconds.
func (j *Job) DelayTime(now time.Time) int64 {
	switch {
	case j.Status == InQueue:
		return now.Sub(j.QueuedAt).Milliseconds()
	case j.StartedAt.IsZero():
		return 0
	}
	return max(j.StartedAt.Sub(j.QueuedAt).Milliseconds(), 0)
}

// ExecutionTime is the time the job has run (or ran), in milliseconds.
func (j *Job) ExecutionTime(now time.Time) int64 {
	switch {
	case j.StartedAt.IsZero():
		return 0
	case j.Status == InProgress:
		return now.Sub(j.StartedAt).Milliseconds()
	case j.EndedAt.IsZero():
		return 0
	}
	return max(j.EndedAt.Sub(j.StartedAt).Milliseconds(), 0)
}

func (j *Job) String() string { return fmt.Sprintf("job %s (%s, %s)", j.ID, j.Endpoint, j.Status) }
