package core_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
)

// A worker whose last job asked for stopPod (runpod's refresh_worker) takes no further job,
// and a job it was told to stop but may still run (a cancel the SDK has not let go of until its
// next ping, 10 s later) does not keep it busy: the scheduler retires it at once instead of
// handing it the next job (issue 29, item 14).
func TestStopPodWorkerTakesNoFurtherJob(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.jobs.RegisterWorker(r.ep.ID, "w1")
	r.jobs.RegisterWorker(r.ep.ID, "w2")
	cancelled := r.submit(`{}`)
	r.take("w1")
	if _, err := r.jobs.Cancel(t.Context(), core.JobRef{Endpoint: r.ep.ID, ID: cancelled.ID}); err != nil {
		t.Fatal(err)
	}
	refresh := r.submit(`{}`)
	if tk := r.take("w1"); tk.ID != refresh.ID {
		t.Fatalf("w1 took %s; want %s", tk.ID, refresh.ID)
	}
	if err := r.jobs.Done(t.Context(), r.ep.ID, "w1", refresh.ID, core.Result{Output: []byte(`1`), StopPod: true}); err != nil {
		t.Fatal(err)
	}
	next := r.submit(`{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if got := r.jobs.Take(ctx, r.ep.ID, "w1", 1); len(got) != 0 {
		t.Errorf("the stopPod worker took %v; want nothing", got)
	}
	if st, _ := r.jobs.WorkerStatus("w1"); st.Busy != 0 || !st.StopPod {
		t.Errorf("stopPod worker still running a cancelled job: busy %d, stopPod %v; want 0, true (retire it now)", st.Busy, st.StopPod)
	}
	if !r.jobs.WorkerStopPod("w1") {
		t.Error("WorkerStopPod(w1) = false; want true")
	}
	// The stopped job is still named by job-stop while the worker lasts.
	if got := r.jobs.JobsToStop(context.Background(), "w1", 3*core.StopRepeat); !slices.Equal(got, []string{cancelled.ID}) {
		t.Errorf("job-stop = %v; want [%s]", got, cancelled.ID)
	}
	if tk := r.take("w2"); tk.ID != next.ID {
		t.Errorf("w2 took %s; want %s", tk.ID, next.ID)
	}
}

// A poll in flight when the worker's job asks for stopPod (a worker running several jobs at
// once) ends with nothing, rather than taking the next job that arrives.
func TestStopPodEndsThePollInFlight(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.jobs.RegisterWorker(r.ep.ID, "w1")
	r.jobs.RegisterWorker(r.ep.ID, "w2")
	j := r.submit(`{}`)
	r.take("w1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	polled := make(chan []core.Taken, 1)
	go func() { polled <- r.jobs.Take(ctx, r.ep.ID, "w1", 1) }()
	testkit.Eventually(t, "w1's second poll to park", func() bool { return r.js.Parked(r.ep.ID) > 0 })
	if err := r.jobs.Done(t.Context(), r.ep.ID, "w1", j.ID, core.Result{Output: []byte(`1`), StopPod: true}); err != nil {
		t.Fatal(err)
	}
	next := r.submit(`{}`)
	if got := <-polled; len(got) != 0 {
		t.Errorf("the poll in flight took %v after stopPod; want nothing", got)
	}
	if tk := r.take("w2"); tk.ID != next.ID {
		t.Errorf("w2 took %s; want %s", tk.ID, next.ID)
	}
}
