package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/store/postgres"
)

// insertJobs queues n jobs of the endpoint, oldest first, and returns their ids in order.
func insertJobs(t *testing.T, s *postgres.Jobs, endpoint string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		j, err := s.Insert(context.Background(), job(endpoint, time.Now()), []byte(fmt.Sprint(i)), true)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = j.ID
	}
	return ids
}

// holder returns the status and worker of a job as stored.
func holder(t *testing.T, s *postgres.Jobs, id string) (core.JobStatus, string) {
	t.Helper()
	j, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j.Status, j.WorkerID
}

// Takers that arrive while a take of their endpoint runs are served together by the next one:
// one statement moves a job to each of their workers, and each worker gets its own.
func TestJobsTakeServesSeveralWorkersInOneStatement(t *testing.T) {
	t.Parallel()
	s := openJobs(t, pgtest.URL(t))
	ids := insertJobs(t, s, "ep", 6)
	release := make(chan struct{})
	groups := make(chan int, 8)
	first := true
	s.OnTake(func(n int) {
		groups <- n
		if first { // hold the first take while the others arrive
			first = false
			<-release
		}
	})
	ctx := context.Background()
	type result struct {
		worker string
		got    []core.TakenJob
		err    error
	}
	results := make(chan result, 4)
	take := func(w string, max int) {
		got, err := s.Take(ctx, "ep", w, max, time.Now())
		results <- result{w, got, err}
	}
	go take("w0", 1)
	if n := <-groups; n != 1 {
		t.Fatalf("the first take serves %d takers; want 1", n)
	}
	go take("w1", 1)
	go take("w2", 2)
	go take("w3", 1)
	testkit.Eventually(t, "three takers wait", func() bool { return s.Taking("ep") == 3 })
	close(release)
	if n := <-groups; n != 3 {
		t.Fatalf("the second take serves %d takers; want all 3 in one statement", n)
	}
	seen := map[string]string{}
	for range 4 {
		r := <-results
		want := 1
		if r.worker == "w2" {
			want = 2
		}
		if r.err != nil || len(r.got) != want {
			t.Fatalf("%s got %d jobs (%v); want %d", r.worker, len(r.got), r.err, want)
		}
		for _, tj := range r.got {
			if prev, ok := seen[tj.Job.ID]; ok {
				t.Fatalf("job %s handed to %s and %s", tj.Job.ID, prev, r.worker)
			}
			seen[tj.Job.ID] = r.worker
			if tj.Job.Status != core.InProgress || tj.Job.WorkerID != r.worker {
				t.Fatalf("%s got job %s as %s of %q", r.worker, tj.Job.ID, tj.Job.Status, tj.Job.WorkerID)
			}
			if st, w := holder(t, s, tj.Job.ID); st != core.InProgress || w != r.worker {
				t.Fatalf("job %s handed to %s is stored %s of %q", tj.Job.ID, r.worker, st, w)
			}
		}
	}
	if seen[ids[0]] != "w0" {
		t.Errorf("the oldest job went to %q; want the first taker", seen[ids[0]])
	}
	if _, ok := seen[ids[5]]; ok {
		t.Errorf("the newest job was taken; 5 slots want the 5 oldest")
	}
}

// A taker that leaves while its grouped take runs gets nothing, and its job goes back to the
// head of the queue as it was: no retry spent, the next taker gets it.
func TestJobsTakeForATakerThatLeftGoesBack(t *testing.T) {
	t.Parallel()
	s := openJobs(t, pgtest.URL(t))
	ids := insertJobs(t, s, "ep", 2)
	entered := make(chan struct{})
	release := make(chan struct{})
	s.OnTake(func(int) {
		entered <- struct{}{}
		<-release
	})
	for _, leader := range []bool{true, false} {
		t.Run(fmt.Sprintf("leader=%v", leader), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan []core.TakenJob, 1)
			if leader { // the leaving taker runs the statement itself
				go func() { got, _ := s.Take(ctx, "ep", "gone", 1, time.Now()); done <- got }()
				<-entered
			} else { // another taker leads; the leaving one waits in the group
				go func() { _, _ = s.Take(context.Background(), "ep", "other", 1, time.Now()) }()
				<-entered
				go func() { got, _ := s.Take(ctx, "ep", "gone", 1, time.Now()); done <- got }()
				testkit.Eventually(t, "the taker waits", func() bool { return s.Taking("ep") == 1 })
				release <- struct{}{} // the other's take
				<-entered             // the gone taker's statement runs
			}
			cancel()
			if !leader {
				testkit.Eventually(t, "the taker left", func() bool { return len(done) == 1 })
			}
			release <- struct{}{}
			if got := <-done; len(got) != 0 {
				t.Fatalf("a taker that left got %d jobs", len(got))
			}
		})
	}
	// Both jobs: one went to "other"; the other went back, queued, to be taken next.
	testkit.Eventually(t, "the takes end", func() bool { return !s.TakesRunning("ep") })
	s.OnTake(nil)
	if st, w := holder(t, s, ids[0]); st != core.InProgress || w != "other" {
		t.Fatalf("the oldest job is %s of %q; want taken by the taker that stayed", st, w)
	}
	back := ids[1]
	if st, w := holder(t, s, back); st != core.InQueue || w != "" {
		t.Fatalf("the job taken for the taker that left is %s of %q; want queued again", st, w)
	}
	j, _ := s.Get(context.Background(), back)
	if j.Retries != 0 || !j.StartedAt.IsZero() {
		t.Errorf("the job that went back has %d retries, started %v; want as queued", j.Retries, j.StartedAt)
	}
	got, err := s.Take(context.Background(), "ep", "next", 1, time.Now())
	if err != nil || len(got) != 1 || got[0].Job.ID != back {
		t.Fatalf("the next take got %v (%v); want the job that went back", got, err)
	}
}

// Many takers on two replicas, some leaving at random: every job is handed to exactly one
// taker that stayed, and is stored as held by that taker's worker.
func TestJobsGroupedTakesHandEachJobOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	stores := []*postgres.Jobs{openJobs(t, url), openJobs(t, url)}
	const n = 300
	insertJobs(t, stores[0], "ep", n)
	var mu sync.Mutex
	handed := map[string]string{}
	var delivered atomic.Int64
	var wg sync.WaitGroup
	for w := range 24 {
		s := stores[w%2]
		worker := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			for delivered.Load() < n {
				ctx, cancel := context.WithCancel(context.Background())
				if rand.IntN(4) == 0 {
					go func() { time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond); cancel() }()
				}
				got, err := s.Take(ctx, "ep", worker, 1+rand.IntN(2), time.Now())
				cancel()
				if err != nil && ctx.Err() == nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, tj := range got {
					if prev, ok := handed[tj.Job.ID]; ok {
						t.Errorf("job %s handed to %s and %s", tj.Job.ID, prev, worker)
					}
					handed[tj.Job.ID] = worker
				}
				mu.Unlock()
				delivered.Add(int64(len(got)))
				if len(got) == 0 && err == nil {
					wctx, wcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
					_ = s.WaitAvailable(wctx, "ep")
					wcancel()
				}
			}
		})
	}
	wg.Wait()
	if len(handed) != n {
		t.Fatalf("%d jobs handed out; want %d", len(handed), n)
	}
	for id, w := range handed {
		if st, got := holder(t, stores[0], id); st != core.InProgress || got != w {
			t.Fatalf("job %s handed to %s is stored %s of %q", id, w, st, got)
		}
	}
}

// A job taken for a taker that left goes back only if it is still as taken: taken again
// since by the same worker (after a lost-worker rule requeued it), it stays the worker's.
func TestJobsUntakeLeavesAJobThatChanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openJobs(t, pgtest.URL(t))
	insertJobs(t, s, "ep", 1)
	got, err := s.Take(ctx, "ep", "w", 1, time.Now())
	if err != nil || len(got) != 1 {
		t.Fatalf("take: %v, %d jobs", err, len(got))
	}
	id := got[0].Job.ID
	rev := func() int64 {
		var r int64
		if err := s.DB().Pool.QueryRow(ctx, `SELECT rev FROM gantry_jobs WHERE id = $1`, id).Scan(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	taken := rev()
	// The worker-lost rule requeues it, and the same worker takes it again.
	if _, err := s.Update(ctx, id, core.Statuses(core.InProgress), func(j *core.Job) error {
		j.Status, j.WorkerID, j.StartedAt, j.Retries = core.InQueue, "", time.Time{}, j.Retries+1
		return nil
	}, true); err != nil {
		t.Fatal(err)
	}
	if again, err := s.Take(ctx, "ep", "w", 1, time.Now()); err != nil || len(again) != 1 {
		t.Fatalf("taking it again: %v, %d jobs", err, len(again))
	}
	s.Untake("ep", "w", got, []int64{taken})
	if st, w := holder(t, s, id); st != core.InProgress || w != "w" {
		t.Fatalf("after a stale put-back the job is %s of %q; want still the worker's", st, w)
	}
	s.Untake("ep", "w", got, []int64{rev()})
	if st, w := holder(t, s, id); st != core.InQueue || w != "" {
		t.Fatalf("after a put-back at its revision the job is %s of %q; want queued", st, w)
	}
}
