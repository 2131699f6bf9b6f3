package core_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
)

// A worker silent while it holds a job is signalled lost once, to the subscribed scheduler;
// from then on it takes nothing (a poll in flight ends empty) and /health does not count it,
// and its job goes back to the queue.
func TestLostWorkerIsSignalledAndTakesNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	signals := r.jobs.SubscribeWorkers()
	j := r.submit(`{}`)
	r.jobs.RegisterWorker(r.ep.ID, "w1")
	r.jobs.RegisterWorker(r.ep.ID, "w2")
	done, cancel := context.WithCancel(context.Background())
	cancel()
	r.jobs.Take(done, r.ep.ID, "w2", 1) // w2 is ready and idle
	r.take("w1")
	ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	polled := make(chan []core.Taken, 1)
	go func() { polled <- r.jobs.Take(ctx, r.ep.ID, "w1", 1) }()
	// The poll must be in flight before the clock moves: it marks w1 seen at its start.
	testkit.Eventually(t, "w1's poll to park", func() bool { return r.js.Parked(r.ep.ID) > 0 })
	r.jobs.Ping(t.Context(), "w2", "")
	r.clock.Advance(core.WorkerLostAfter + time.Second)
	r.jobs.Ping(t.Context(), "w2", "")
	lostAt := r.clock.Now()
	r.jobs.Tick(t.Context(), r.clock.Now())
	r.jobs.Tick(t.Context(), r.clock.Now())
	var lost []core.WorkerSignal
	for _, sig := range signals.Take(nil) {
		if sig.Kind == core.WorkerLost {
			lost = append(lost, sig)
		}
	}
	if want := []core.WorkerSignal{{Worker: "w1", Kind: core.WorkerLost, At: lostAt}}; !slices.Equal(lost, want) {
		t.Errorf("lost signals = %v; want %v", lost, want)
	}
	if h := r.jobs.Health(t.Context(), r.ep.ID); h.Idle != 1 || h.Running != 0 || h.InQueue != 1 {
		t.Errorf("health = idle %d, running %d, inQueue %d; want 1, 0, 1 (the lost worker not counted)", h.Idle, h.Running, h.InQueue)
	}
	if got := <-polled; len(got) != 0 {
		t.Errorf("the lost worker's poll took %v; want nothing", got)
	}
	if got := r.take("w2"); got.ID != j.ID {
		t.Errorf("w2 took %s; want %s", got.ID, j.ID)
	}
}

// A job stopped (here cancelled) while the worker still reports running it is named by
// job-stop again, after StopRepeat, until the worker's ping no longer lists it or the worker
// posts for it; meanwhile the worker counts as busy.
func TestStoppedJobIsNamedAgainWhileTheWorkerHoldsIt(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"ping", "done"} {
		r := newRig(t)
		r.jobs.RegisterWorker(r.ep.ID, "w1")
		j := r.submit(`{}`)
		tk := r.take("w1")
		if _, err := r.jobs.Cancel(t.Context(), core.JobRef{Endpoint: r.ep.ID, ID: j.ID}); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if got := r.jobs.JobsToStop(ctx, "w1", 5*time.Second); !slices.Equal(got, []string{tk.ID}) {
			t.Fatalf("%s: first job-stop = %v; want [%s]", end, got, tk.ID)
		}
		// The SDK ignored it (its task had not started): it keeps listing the job.
		r.clock.Advance(2 * time.Second)
		r.jobs.PingJobs(t.Context(), "w1", "", "other,"+tk.ID)
		start := time.Now()
		if got := r.jobs.JobsToStop(ctx, "w1", 5*time.Second); !slices.Equal(got, []string{tk.ID}) {
			t.Fatalf("%s: job-stop while the worker holds the job = %v; want [%s]", end, got, tk.ID)
		}
		if d := time.Since(start); d < core.StopRepeat/2 {
			t.Errorf("%s: the stop was named again after %s; want a pause of about %s", end, d, core.StopRepeat)
		}
		if h := r.jobs.Health(t.Context(), r.ep.ID); h.Running != 1 || h.Idle != 0 {
			t.Errorf("%s: health = running %d, idle %d; want the worker busy", end, h.Running, h.Idle)
		}
		if st, _ := r.jobs.WorkerStatus("w1"); st.Busy != 1 {
			t.Errorf("%s: worker busy = %d; want 1", end, st.Busy)
		}
		if r.jobs.SuspendWorker(t.Context(), "w1") {
			t.Errorf("%s: SuspendWorker of a worker still running a stopped job = true", end)
		}
		switch end {
		case "ping":
			r.clock.Advance(10 * time.Second)
			r.jobs.PingJobs(t.Context(), "w1", "", "")
		case "done":
			if err := r.jobs.Done(t.Context(), r.ep.ID, "w1", tk.ID, core.Result{Output: []byte(`1`)}); core.KindOf(err) != core.KindConflict {
				t.Errorf("done: the stopped job's result = %v; want a conflict", err)
			}
		}
		if got := r.jobs.JobsToStop(ctx, "w1", 3*core.StopRepeat/2); len(got) != 0 {
			t.Errorf("%s: job-stop after the worker let the job go = %v; want nothing", end, got)
		}
		if h := r.jobs.Health(t.Context(), r.ep.ID); h.Running != 0 || h.Idle != 1 {
			t.Errorf("%s: health = running %d, idle %d; want the worker idle", end, h.Running, h.Idle)
		}
	}
}

// A worker that never reports its jobs in pings does not stay busy with a stopped job: it is
// let go after WorkerLostAfter, and is not taken for lost.
func TestStoppedJobIsForgottenWithoutPings(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.jobs.RegisterWorker(r.ep.ID, "w1")
	signals := r.jobs.SubscribeWorkers()
	j := r.submit(`{}`)
	r.take("w1")
	if _, err := r.jobs.Cancel(t.Context(), core.JobRef{Endpoint: r.ep.ID, ID: j.ID}); err != nil {
		t.Fatal(err)
	}
	r.jobs.Tick(t.Context(), r.clock.Advance(core.WorkerLostAfter+time.Second))
	lost := slices.DeleteFunc(signals.Take(nil), func(s core.WorkerSignal) bool { return s.Kind != core.WorkerLost })
	if st, _ := r.jobs.WorkerStatus("w1"); st.Busy != 0 || len(lost) != 0 {
		t.Errorf("after WorkerLostAfter: busy %d, lost %v; want 0, none", st.Busy, lost)
	}
}

// TestPingIsTheStoresHeartbeat: a worker's ping reaches the job store, where a replica that
// does not hear the worker tells a lost worker from a live one.
func TestPingIsTheStoresHeartbeat(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.jobs.RegisterWorker(r.ep.ID, "w")
	r.submit(`{}`)
	r.take("w")
	start := r.clock.Now()
	for i, ping := range []func(){
		func() { r.jobs.Ping(t.Context(), "w", "") },
		func() { r.jobs.PingJobs(t.Context(), "w", "", "") },
	} {
		r.clock.Advance(20 * time.Second)
		ping()
		since := start.Add(time.Duration(20*i+10) * time.Second)
		if silent, err := r.js.Silent(context.Background(), since); err != nil || len(silent) != 0 {
			t.Errorf("ping %d: store's Silent(%v after the take) = %v, %v; want none", i, since.Sub(start), silent, err)
		}
	}
}

// TestStoreSilentWorkerOfAnotherEngineIsLost: a job held by a worker this engine does not
// know (another replica's) goes back to the queue once the worker's heartbeats in the store
// stop for WorkerLostAfter, with one more retry; until then it is left alone.
func TestStoreSilentWorkerOfAnotherEngineIsLost(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	j := r.submit(`{}`)
	got, err := r.js.Take(context.Background(), r.ep.ID, "elsewhere", 1, r.clock.Now()) // another replica's take
	if err != nil || len(got) != 1 {
		t.Fatalf("store Take = %v, %v; want the job", got, err)
	}
	half := core.WorkerLostAfter / 2
	r.jobs.Tick(t.Context(), r.clock.Advance(half))
	if st := r.status(j.ID); st != core.InProgress {
		t.Fatalf("job after %v of silence is %s; want IN_PROGRESS", half, st)
	}
	r.jobs.Tick(t.Context(), r.clock.Advance(core.WorkerLostAfter))
	got2, _ := r.jobs.Get(t.Context(), core.JobRef{Endpoint: r.ep.ID, ID: j.ID}, 0)
	if got2.Status != core.InQueue || got2.Retries != 1 {
		t.Errorf("job after its worker went silent is %s with %d retries; want IN_QUEUE with 1", got2.Status, got2.Retries)
	}
}
