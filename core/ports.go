package core

import "context"

// This file declares the ports the scheduler reaches the job engine through. The scheduler
// depends on these interfaces only, never on *Jobs, so that the engine behind them can change
// (a store shared by replicas) without the scheduler knowing.

// WorkerRegistry is the job engine's registry of the queue workers a scheduler runs: it hands
// each worker its token, stops and resumes handing it jobs around a suspension (FLASHBOOT),
// forgets it when it exits, and signals when it becomes ready or is lost.
type WorkerRegistry interface {
	// RegisterWorkerActivity records a worker about to start; it returns the worker's token
	// and a lock-free reader of its activity.
	RegisterWorkerActivity(endpoint, worker string) (token string, act WorkerActivity)
	// SuspendWorker stops handing jobs to an idle worker; false, changing nothing, when the
	// worker holds a job (or takes one meanwhile) or is unknown.
	SuspendWorker(ctx context.Context, worker string) bool
	// ResumeWorker lets a suspended worker take jobs again; its next poll counts as its first.
	ResumeWorker(worker string)
	// ForgetWorker removes a worker that exited; its jobs follow the worker-lost rule.
	ForgetWorker(ctx context.Context, worker string)
	// WorkerStatus returns a registered worker's activity, with its self-reported health.
	WorkerStatus(worker string) (WorkerStatus, bool)
	// RegisteredWorkers returns how many workers are registered and not yet forgotten.
	RegisteredWorkers() int
	// SubscribeWorkers returns the registry's signals about its workers (ready, lost) for the
	// one scheduler that runs them; signals are posted from the first call on.
	SubscribeWorkers() *WorkerSignals
}

// LoadReader is what the autoscaler reads of an endpoint's jobs, and how it hears of them.
type LoadReader interface {
	// LoadCounter returns the reader of the endpoint's job counts (and, when asked, the oldest
	// queued job's time).
	LoadCounter(endpoint string) LoadCounter
	// ListenAvailable subscribes fn, until ctx ends, to the job store's wake-up for a job
	// queued at an endpoint (see JobStore.ListenAvailable); it returns once subscribed.
	ListenAvailable(ctx context.Context, fn func(endpoint string)) error
}

var (
	_ WorkerRegistry = (*Jobs)(nil)
	_ LoadReader     = (*Jobs)(nil)
)
