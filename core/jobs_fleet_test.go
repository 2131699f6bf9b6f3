package core_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

func TestSuspendedWorkerGetsNoJobUntilResumed(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.jobs.RegisterWorker(r.ep.ID, "w1")
	if !r.jobs.SuspendWorker(t.Context(), "w1") {
		t.Fatal("SuspendWorker(idle w1) = false")
	}
	j := r.submit(`{}`)
	// A job is queued: an unsuspended worker's Take would return it at once, whatever its
	// deadline. The suspended worker's waits out its deadline with nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if g := r.jobs.Take(ctx, r.ep.ID, "w1", 1); len(g) != 0 || r.status(j.ID) != core.InQueue {
		t.Fatalf("a suspended worker took %v (job %s)", g, r.status(j.ID))
	}
	got := make(chan []core.Taken, 1)
	go func() { got <- r.jobs.Take(context.Background(), r.ep.ID, "w1", 1) }() // parks until the resume
	r.jobs.ResumeWorker("w1")
	select {
	case g := <-got:
		if len(g) != 1 || g[0].ID != j.ID {
			t.Fatalf("resumed worker took %v; want %s", g, j.ID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the resumed worker's parked poll got nothing")
	}
	if r.jobs.SuspendWorker(t.Context(), "w1") {
		t.Error("SuspendWorker(busy w1) = true; want false")
	}
	if st, _ := r.jobs.WorkerStatus("w1"); st.Busy != 1 || !st.Polled {
		t.Errorf("WorkerStatus(w1) = %+v; want busy and polled", st)
	}
}

func TestWorkerReadyAndIdleSince(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.jobs = core.NewJobs(core.JobsConfig{Store: r.js, Clock: r.clock})
	signals := r.jobs.SubscribeWorkers()
	r.jobs.RegisterWorker(r.ep.ID, "w1")
	done, cancel := context.WithCancel(context.Background())
	cancel()
	firstPoll := r.clock.Now()
	r.jobs.Take(done, r.ep.ID, "w1", 1) // the first poll
	r.jobs.Take(done, r.ep.ID, "w1", 1)
	start := r.clock.Now()
	j := r.submit(`{}`)
	r.take("w1")
	end := r.clock.Advance(3 * time.Second)
	if err := r.jobs.Done(t.Context(), r.ep.ID, "w1", j.ID, core.Result{Output: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	st, _ := r.jobs.WorkerStatus("w1")
	if !st.IdleSince.Equal(end) || st.Busy != 0 {
		t.Errorf("WorkerStatus after a job = %+v; want idle since %v (not %v)", st, end, start)
	}
	r.jobs.SuspendWorker(t.Context(), "w1")
	r.jobs.ResumeWorker("w1")
	resumedPoll := r.clock.Advance(time.Second)
	r.jobs.Take(done, r.ep.ID, "w1", 1) // the first poll after the resume
	want := []core.WorkerSignal{{Worker: "w1", Kind: core.WorkerReady, At: firstPoll}, {Worker: "w1", Kind: core.WorkerReady, At: resumedPoll}}
	if got := signals.Take(nil); !slices.Equal(got, want) {
		t.Errorf("ready signals = %v; want %v (w1 at its first poll and after its resume)", got, want)
	}
	if l := r.jobs.Load(r.ep.ID); l.ExecCount != 1 || l.ExecMs != 3000 || l.Submitted != 1 {
		t.Errorf("Load = %+v; want one job of 3000 ms submitted and run", l)
	}
}

// TestSuspendRacesTake races suspensions against jobs arriving: a worker SuspendWorker
// reported suspended never holds a job.
func TestSuspendRacesTake(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for i := range 200 {
		w := "w" + string(rune('a'+i%26)) + time.Duration(i).String()
		r.jobs.RegisterWorker(r.ep.ID, w)
		got := make(chan []core.Taken, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		go func() { got <- r.jobs.Take(ctx, r.ep.ID, w, 1) }()
		var submitted sync.WaitGroup
		submitted.Go(func() { r.submit(`{}`, func(s *core.Submission) { s.Sync = true }) })
		suspended := r.jobs.SuspendWorker(t.Context(), w)
		st, _ := r.jobs.WorkerStatus(w)
		if suspended && st.Busy > 0 {
			t.Fatalf("round %d: SuspendWorker = true, but the worker holds %d jobs", i, st.Busy)
		}
		if suspended {
			r.jobs.ResumeWorker(w)
		}
		g := <-got
		cancel()
		submitted.Wait()
		for _, tk := range g {
			_ = r.jobs.Done(t.Context(), r.ep.ID, w, tk.ID, core.Result{Output: []byte(`1`)})
		}
		r.jobs.ForgetWorker(t.Context(), w)
	}
}
