package core

import (
	"sync"
	"time"
)

// WorkerSignalKind says what happened to a worker.
type WorkerSignalKind uint8

const (
	// WorkerReady says the worker polled for the first time since it started or resumed, the end
	// of its cold start.
	WorkerReady WorkerSignalKind = iota + 1
	// WorkerLost says the worker went silent for WorkerLostAfter while holding work. It is given
	// no more jobs, and its jobs go back to the queue; the scheduler stops it by force.
	WorkerLost
)

// WorkerSignal is one thing the job engine tells the scheduler about a worker.
type WorkerSignal struct {
	Worker string
	Kind   WorkerSignalKind
	At     time.Time // when it happened, on the engine's clock
}

// WorkerSignals carries the job engine's signals about workers to the scheduler. Posting never
// blocks the engine and never drops a signal (a dropped ready would fail a healthy worker at
// its init timeout): signals wait in a queue, which holds at most a few per worker, until the
// reader takes them.
type WorkerSignals struct {
	mu         sync.Mutex
	subscribed bool
	queue      []WorkerSignal
	ready      chan struct{} // holds a token while the queue is not empty
}

// C returns a channel that receives when signals wait to be taken.
func (ws *WorkerSignals) C() <-chan struct{} { return ws.ready }

// Take appends the waiting signals to dst, oldest first, and returns it.
func (ws *WorkerSignals) Take(dst []WorkerSignal) []WorkerSignal {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	dst = append(dst, ws.queue...)
	clear(ws.queue)
	ws.queue = ws.queue[:0]
	return dst
}

// Unsubscribe drops the signals waiting and stops the engine posting more, as before the first
// SubscribeWorkers: for a scheduler that closed.
func (ws *WorkerSignals) Unsubscribe() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.subscribed = false
	clear(ws.queue)
	ws.queue = nil
}

// post queues a signal; false (and nothing queued) when no one subscribed.
func (ws *WorkerSignals) post(s WorkerSignal) bool {
	ws.mu.Lock()
	if !ws.subscribed {
		ws.mu.Unlock()
		return false
	}
	ws.queue = append(ws.queue, s)
	ws.mu.Unlock()
	select {
	case ws.ready <- struct{}{}:
	default: // a token already waits
	}
	return true
}

// listened reports whether anyone reads the signals.
func (ws *WorkerSignals) listened() bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.subscribed
}

// SubscribeWorkers returns the engine's signals about its workers; from the first call on, the
// engine posts them, and marks a lost worker lost (the subscriber stops it) instead of only
// taking its jobs back. It implements WorkerRegistry.
func (js *Jobs) SubscribeWorkers() *WorkerSignals {
	js.signals.mu.Lock()
	defer js.signals.mu.Unlock()
	js.signals.subscribed = true
	return &js.signals
}
