package core_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// Signals wait, in order, for a subscriber that is slow to read them: posting never blocks the
// engine and drops none (a dropped ready would fail a healthy worker at its init timeout).
func TestWorkerSignalsWaitForASlowReader(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	signals := r.jobs.SubscribeWorkers()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	const n = 100 // far beyond any channel buffer the engine could block on
	var want []core.WorkerSignal
	for i := range n {
		w := fmt.Sprint("w", i)
		r.jobs.RegisterWorker(r.ep.ID, w)
		at := r.clock.Advance(time.Millisecond)
		r.jobs.Take(done, r.ep.ID, w, 1) // its first poll
		want = append(want, core.WorkerSignal{Worker: w, Kind: core.WorkerReady, At: at})
	}
	select {
	case <-signals.C():
	default:
		t.Fatal("C() is empty with signals waiting")
	}
	got := signals.Take(nil)
	if len(got) != n {
		t.Fatalf("took %d signals; want %d", len(got), n)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("signal %d = %+v; want %+v", i, got[i], want[i])
		}
	}
	if more := signals.Take(nil); len(more) != 0 {
		t.Errorf("a second Take = %v; want nothing", more)
	}
}

// With no scheduler subscribed, the engine keeps no signals (nothing would read them), and a
// silent worker is not marked lost: it only loses its jobs.
func TestWorkerSignalsNeedASubscriber(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	j := r.submit(`{}`)
	r.jobs.RegisterWorker(r.ep.ID, "w1")
	r.take("w1")
	r.jobs.Tick(t.Context(), r.clock.Advance(core.WorkerLostAfter+time.Second))
	if got := r.status(j.ID); got != core.InQueue {
		t.Fatalf("the silent worker's job is %s; want %s", got, core.InQueue)
	}
	if got := r.take("w1"); got.ID != j.ID { // not lost: it may take the job again
		t.Errorf("w1 took %s; want %s", got.ID, j.ID)
	}
	if got := r.jobs.SubscribeWorkers().Take(nil); len(got) != 0 {
		t.Errorf("signals kept before anyone subscribed = %v; want none", got)
	}
}

// A subscriber that unsubscribes (a scheduler that closed) leaves nothing waiting, and nothing
// is kept for it afterwards.
func TestWorkerSignalsStopAfterUnsubscribe(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	signals := r.jobs.SubscribeWorkers()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	r.jobs.RegisterWorker(r.ep.ID, "w1")
	r.jobs.Take(done, r.ep.ID, "w1", 1) // a ready signal waits
	signals.Unsubscribe()
	r.jobs.RegisterWorker(r.ep.ID, "w2")
	r.jobs.Take(done, r.ep.ID, "w2", 1)
	if got := signals.Take(nil); len(got) != 0 {
		t.Errorf("signals after Unsubscribe = %v; want none", got)
	}
}
