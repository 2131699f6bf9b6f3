package core_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// signalingStore is a job store that says when a poll parks on it.
type signalingStore struct {
	core.JobStore
	polls chan struct{}
}

func (s *signalingStore) WaitAvailable(ctx context.Context, endpoint string) error {
	select {
	case s.polls <- struct{}{}:
	default:
	}
	return s.JobStore.WaitAvailable(ctx, endpoint)
}

// TestDrainAndRelease is a graceful stop as the job engine sees it: Drain ends the polls
// waiting for a job and hands out no more, running jobs still complete, and Release puts the
// ones still running back IN_QUEUE with their retries unchanged, so that after a restart they
// run again as if the stop had not happened.
func TestDrainAndRelease(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	d := &signalingStore{JobStore: r.js, polls: make(chan struct{}, 16)}
	r.jobs = core.NewJobs(core.JobsConfig{Store: d, Clock: r.clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for _, w := range []string{"w1", "w2", "w3"} {
		r.jobs.RegisterWorker("ep1", w)
	}
	a := r.submit(`{"n":"a"}`)
	r.take("w1")
	r.jobs.Tick(t.Context(), r.clock.Advance(core.WorkerLostAfter+time.Second)) // a was lost once: retries 1
	r.jobs.Ping(t.Context(), "w2", "")
	if got := r.take("w1"); got.ID != a.ID {
		t.Fatalf("w1 took %s; want %s", got.ID, a.ID)
	}
	b := r.submit(`{"n":"b"}`)
	r.take("w2")

	for len(d.polls) > 0 { // the takes above
		<-d.polls
	}
	polled := make(chan []core.Taken, 1)
	go func() { polled <- r.jobs.Take(context.Background(), "ep1", "w3", 1) }() // waits: nothing queued
	select {
	case <-d.polls:
	case <-time.After(10 * time.Second):
		t.Fatal("the poll did not reach the queue")
	}
	r.jobs.Drain()
	select {
	case got := <-polled:
		if len(got) != 0 {
			t.Errorf("a poll waiting when Drain began got %d jobs; want none", len(got))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a poll waiting when Drain began did not end")
	}
	c := r.submit(`{"n":"c"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	if got := r.jobs.Take(ctx, "ep1", "w3", 1); len(got) != 0 {
		t.Errorf("Take while draining = %d jobs; want none", len(got))
	}
	cancel()
	if s := r.status(c.ID); s != core.InQueue {
		t.Errorf("job submitted while draining is %s; want IN_QUEUE", s)
	}

	// A running job still completes while draining.
	if n := r.jobs.Running(); n != 2 {
		t.Errorf("Running() = %d; want 2", n)
	}
	if err := r.jobs.Done(t.Context(), "ep1", "w2", b.ID, core.Result{Output: json.RawMessage(`"b"`)}); err != nil {
		t.Fatalf("Done while draining = %v; want nil", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	if r.jobs.WaitRunning(ctx, time.Millisecond) {
		t.Error("WaitRunning with a job still held = true; want false at the deadline")
	}
	cancel()

	n, err := r.jobs.Release(t.Context())
	if err != nil || n != 1 {
		t.Fatalf("Release() = %d, %v; want 1, nil", n, err)
	}
	if !r.jobs.WaitRunning(context.Background(), time.Millisecond) {
		t.Error("WaitRunning after Release = false; want true")
	}
	got, _ := r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: a.ID}, 0)
	if got.Status != core.InQueue || got.Retries != 1 || got.WorkerID != "" {
		t.Errorf("released job: %s retries %d worker %q; want IN_QUEUE, retries 1 (unchanged), no worker", got.Status, got.Retries, got.WorkerID)
	}
	if err := r.jobs.Done(t.Context(), "ep1", "w1", a.ID, core.Result{Output: json.RawMessage(`"late"`)}); core.KindOf(err) != core.KindConflict {
		t.Errorf("the worker's result after Release = %v; want a conflict", err)
	}
	if ids := r.jobs.JobsToStop(context.Background(), "w1", time.Second); !slices.Equal(ids, []string{a.ID}) {
		t.Errorf("JobsToStop(w1) = %v; want [%s]", ids, a.ID)
	}

	r.store.Close() // a restart
	r.open()
	queued, requeued, err := r.jobs.Recover(t.Context())
	if err != nil || queued != 2 || requeued != 0 {
		t.Fatalf("Recover = %d, %d, %v; want 2 queued (the released job and the one submitted while draining), 0 requeued", queued, requeued, err)
	}
	r.jobs.RegisterWorker("ep1", "w4")
	if tk := r.take("w4"); tk.ID != a.ID {
		t.Errorf("first job after the restart = %s; want the released one, %s", tk.ID, a.ID)
	}
	if got, _ := r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: a.ID}, 0); got.Retries != 1 {
		t.Errorf("released job after the restart: retries %d; want 1", got.Retries)
	}
	if s := r.status(b.ID); s != core.Completed {
		t.Errorf("job completed while draining is %s after the restart; want COMPLETED", s)
	}
}
