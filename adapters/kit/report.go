package kit

import (
	"sync"

	"github.com/gantryhq/gantry/pool"
)

// Reporter delivers one worker's events to the scheduler (its spec.Report) in the order they
// were queued, one at a time, and holds no lock while Report runs, so that Report may call the
// pool back. An adapter queues an event while it holds its own lock over the worker's state,
// so events follow the order of the changes, and flushes after it let go of that lock:
//
//	w.mu.Lock()
//	w.phase = running
//	w.events.Queue(pool.WorkerEvent{Worker: w.id, State: pool.WorkerRunning})
//	w.mu.Unlock()
//	w.events.Flush()
//
// The zero Reporter is not usable; NewReporter makes one. It is safe for concurrent use.
type Reporter struct {
	report func(pool.WorkerEvent)

	mu       sync.Mutex
	queue    []pool.WorkerEvent
	flushing bool // a goroutine is reporting the queue
}

// NewReporter returns a reporter to report.
func NewReporter(report func(pool.WorkerEvent)) *Reporter {
	return &Reporter{report: report}
}

// Queue adds an event to deliver at the next Flush; it never blocks for long, so it may be
// called with the adapter's locks held.
func (r *Reporter) Queue(e pool.WorkerEvent) {
	r.mu.Lock()
	r.queue = append(r.queue, e)
	r.mu.Unlock()
}

// Flush reports the queued events in order, unless another goroutine is already doing so (it
// reports these too). Call it with none of the adapter's locks held.
func (r *Reporter) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.flushing {
		return
	}
	r.flushing = true
	for len(r.queue) > 0 {
		e := r.queue[0]
		r.queue = r.queue[1:]
		r.mu.Unlock()
		r.report(e)
		r.mu.Lock()
	}
	r.flushing = false
}
