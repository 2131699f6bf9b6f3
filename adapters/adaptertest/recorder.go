package adaptertest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/pool"
)

// Recorder collects the events a pool reports: set a spec's Report to its Report method, then
// wait for an event with Wait. The zero Recorder is ready to use; it is safe for concurrent
// use.
type Recorder struct {
	mu      sync.Mutex
	events  []pool.WorkerEvent
	changed chan struct{} // closed and replaced on every event; nil until someone waits
}

// Report records e. Its signature is WorkerSpec.Report's.
func (r *Recorder) Report(e pool.WorkerEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// Events returns the events recorded for worker id so far, oldest first; every worker's when
// id is "".
func (r *Recorder) Events(id string) []pool.WorkerEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []pool.WorkerEvent
	for _, e := range r.events {
		if id == "" || e.Worker == id {
			out = append(out, e)
		}
	}
	return out
}

// Wait returns the first event of worker id in state, waiting for it up to within; the test
// fails (t.Fatal) when none comes in time. Call it from the test's goroutine.
func (r *Recorder) Wait(t testing.TB, id string, state pool.WorkerState, within time.Duration) pool.WorkerEvent {
	t.Helper()
	e, err := r.await(id, state, within)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// await is Wait for any goroutine: it returns an error instead of failing a test.
func (r *Recorder) await(id string, state pool.WorkerState, within time.Duration) (pool.WorkerEvent, error) {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		for _, e := range r.events {
			if e.Worker == id && e.State == state {
				r.mu.Unlock()
				return e, nil
			}
		}
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			return pool.WorkerEvent{}, fmt.Errorf("worker %s: no %v event within %v (its events: %s)", id, state, within, FormatEvents(r.Events(id)))
		}
	}
}

// FormatEvents renders events on one line for test messages: "running, exited(stopped)".
func FormatEvents(events []pool.WorkerEvent) string {
	if len(events) == 0 {
		return "none"
	}
	parts := make([]string, len(events))
	for i, e := range events {
		var attrs []string
		if e.Stopped {
			attrs = append(attrs, "stopped")
		}
		if e.Err != nil {
			attrs = append(attrs, "err="+e.Err.Error())
		}
		parts[i] = e.State.String()
		if len(attrs) > 0 {
			parts[i] += "(" + strings.Join(attrs, ", ") + ")"
		}
	}
	return strings.Join(parts, ", ")
}

// checkSequence returns what is wrong with the events of one worker, "" when nothing is: the
// first is WorkerRunning, WorkerSuspended and WorkerResumed alternate after it (a Resumed
// follows a Suspended), at most one WorkerExited comes and nothing after it; only an Exited
// event carries Err or Stopped; every event names the worker and has a time. When exited is
// true the worker must have exited.
func checkSequence(id string, events []pool.WorkerEvent, exited bool) string {
	if len(events) == 0 {
		if exited {
			return "no events; want running ... exited"
		}
		return ""
	}
	suspended, gone := false, false
	for i, e := range events {
		var bad string
		switch {
		case e.Worker != id:
			bad = fmt.Sprintf("names worker %q", e.Worker)
		case e.At.IsZero():
			bad = "has no time (At is zero)"
		case gone:
			bad = "comes after exited"
		case i == 0 && e.State != pool.WorkerRunning:
			bad = "is not running, the first event"
		case i > 0 && e.State == pool.WorkerRunning:
			bad = "repeats running"
		case e.State == pool.WorkerSuspended && suspended:
			bad = "repeats suspended without a resumed between"
		case e.State == pool.WorkerResumed && !suspended:
			bad = "resumes a worker that was not suspended"
		case e.State != pool.WorkerExited && (e.Err != nil || e.Stopped):
			bad = "carries Err or Stopped, which only an exited event may"
		case e.State < pool.WorkerRunning || e.State > pool.WorkerExited:
			bad = "has an unknown state"
		}
		if bad != "" {
			return fmt.Sprintf("event %d (%v) %s; events: %s", i+1, e.State, bad, FormatEvents(events))
		}
		suspended = e.State == pool.WorkerSuspended
		gone = e.State == pool.WorkerExited
	}
	if exited && !gone {
		return "no exited event; events: " + FormatEvents(events)
	}
	return ""
}
