package core

import "context"

// This file declares the ports the job engine reaches its stores and deliveries through.

// JobRecords persists the job records under an in-process JobStore (store/memq over Pebble).
// PutJob with durable=true returns only once the write is synced (an acknowledged /run job
// survives kill -9); durable=false may lose the write in a crash until the next SyncJobs,
// which makes every earlier write durable.
type JobRecords interface {
	PutJob(j *Job, input []byte, durable bool) error // input nil = keep the stored one
	SyncJobs() error
	GetJob(id string) (*Job, error)  // ErrNotFound
	Input(id string) ([]byte, error) // ErrNotFound
	DeleteJob(id string) error
	ScanJobs(fn func(*Job)) error // every stored job, any order
}

// Notifier delivers a job's final state to its webhook. It calls done once the delivery has
// succeeded or been given up on; until then the job stays marked for delivery, and a restart
// delivers it again (webhooks are delivered at least once). It reports false when it has no
// room for the delivery now: the job stays marked, and is offered again on a later Tick.
type Notifier interface {
	Notify(url string, body []byte, done func()) bool
}

// JobObserver hears of jobs handed to workers and of jobs ending, for metrics and traces. The
// engine calls it after the store holds the change, on the worker's request path: it must not
// block. The job passed is the stored record; the observer must not keep or change it.
type JobObserver interface {
	// JobSubmitted: the endpoint's job id was stored IN_QUEUE by the submit whose context is
	// ctx (which carries the submit request's trace span). It gets ids, not the record: a
	// pointer to the record Submit returns would move it to the heap on every submit.
	JobSubmitted(ctx context.Context, endpoint, id string)
	// JobTaken: a worker took the job; its delay is StartedAt - QueuedAt.
	JobTaken(j *Job)
	// JobEnded: the job reached a terminal status from status from (IN_QUEUE for a job
	// cancelled or expired in the queue); its execution time is EndedAt - StartedAt when it ran.
	JobEnded(j *Job, from JobStatus)
}
