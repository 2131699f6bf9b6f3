package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// RunJobStore runs the conformance suite against a job store. The suite has no durability
// test: it does not call the Opener's reopen, which may be nil. The suite passes times to the
// store (it never reads a clock but for wake-up deadlines), so a store must take now from its
// callers as core.JobStore says.
func RunJobStore(t *testing.T, open Opener[core.JobStore]) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s core.JobStore)
	}{
		{"InsertThenGetAndInput", jobsInsertGet},
		{"LargeInputReadBackWhole", jobsLargeInput},
		{"TakeHandsOutOldestFirst", jobsTakeOrder},
		{"TakeSkipsExpiredJobs", jobsTakeSkipsExpired},
		{"EveryTransitionAllowedOrRefused", jobsTransitions},
		{"LatePostCannotOverwriteTerminalState", jobsLatePost},
		{"FailedChangeChangesNothing", jobsChangeError},
		{"ConcurrentTakersNeverShareAJob", jobsConcurrentTake},
		{"ConcurrentUpdatesOneWins", jobsConcurrentUpdate},
		{"RequeuedJobIsTakenAgain", jobsRequeue},
		{"WaitAvailableWakesOnInsert", jobsWaitAvailable},
		{"ListenAvailableHearsInserts", jobsListenAvailable},
		{"WaitEndedWakesOnEnd", jobsWaitEnded},
		{"StreamChunksDrainOnce", jobsStream},
		{"StreamChunksPeekTakesNothing", jobsStreamPeek},
		{"ExpireRemovesPastRetentionAndTTL", jobsExpire},
		{"OverdueNamesJobsPastTimeout", jobsOverdue},
		{"ListNewestFirstWithFilterAndCursor", jobsList},
		{"PurgeChangesOnlyQueuedJobs", jobsPurge},
		{"HeartbeatsTellLostWorkers", jobsHeartbeats},
		{"StatsCountTheQueue", jobsStats},
		{"StatsOldestFollowsTheQueue", jobsStatsOldest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := open(t)
			tc.fn(t, s)
		})
	}
}

// t0 is the suite's "now": microsecond precision, as every store keeps.
var t0 = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

// waitLimit bounds every wait for a wake-up.
const waitLimit = 10 * time.Second

// newJob returns a queued job of the endpoint, queued at at, living a day.
func newJob(endpoint string, at time.Time) core.Job {
	return core.Job{
		ID: core.NewJobKey(false).String(), Endpoint: endpoint, Owner: "alice", Status: core.InQueue,
		Policy: core.JobPolicy{TTLMs: 86_400_000}, CreatedAt: at, QueuedAt: at, Retention: 30 * time.Minute,
		ExpiresAt: at.Add(24 * time.Hour),
	}
}

func input(i int) []byte { return fmt.Appendf(nil, `{"n":%d}`, i) }

// insert stores jobs and returns them as stored.
func insert(t *testing.T, s core.JobStore, jobs ...core.Job) []core.Job {
	t.Helper()
	out := make([]core.Job, len(jobs))
	for i, j := range jobs {
		got, err := s.Insert(context.Background(), j, input(i), i%2 == 0)
		if err != nil {
			t.Fatalf("Insert(%s) = %v; want nil", j.ID, err)
		}
		out[i] = got
	}
	return out
}

// take takes up to max jobs and fails the test on an error.
func take(t *testing.T, s core.JobStore, endpoint, worker string, max int, now time.Time) []core.TakenJob {
	t.Helper()
	got, err := s.Take(context.Background(), endpoint, worker, max, now)
	if err != nil {
		t.Fatalf("Take(%s, %s, %d) = %v; want nil", endpoint, worker, max, err)
	}
	return got
}

func ids(jobs []core.TakenJob) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.Job.ID
	}
	return out
}

func get(t *testing.T, s core.JobStore, id string) core.Job {
	t.Helper()
	j, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%s) = %v; want nil", id, err)
	}
	return j
}

// to returns a change that applies ev by the transition table at now, as core would.
func to(ev core.Event, now time.Time) func(*core.Job) error {
	return func(j *core.Job) error {
		next, err := core.Next(j.Status, ev)
		if err != nil {
			return err
		}
		j.Status = next
		switch {
		case next.Terminal():
			j.EndedAt, j.ExpiresAt = now, now.Add(j.Retention)
		case next == core.InQueue:
			j.WorkerID, j.Output, j.QueuedAt = "", nil, now
		}
		return nil
	}
}

func update(t *testing.T, s core.JobStore, id string, ev core.Event, now time.Time) core.Job {
	t.Helper()
	j, err := s.Update(context.Background(), id, core.From(ev), to(ev, now), true)
	if err != nil {
		t.Fatalf("Update(%s, %s) = %v; want nil", id, ev, err)
	}
	return j
}

func jobsInsertGet(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	a, b := newJob("ep", t0), newJob("ep", t0.Add(time.Millisecond))
	a.Webhook, a.S3Config = "https://example.com/hook", json.RawMessage(`{"bucket":"b"}`)
	got := insert(t, s, a, b)
	if got[0].Seq == 0 || got[1].Seq <= got[0].Seq {
		t.Errorf("Insert Seqs = %d, %d; want increasing from 1", got[0].Seq, got[1].Seq)
	}
	for i, want := range got {
		j := get(t, s, want.ID)
		if j.Status != core.InQueue || j.Endpoint != "ep" || j.Owner != "alice" || j.Seq != want.Seq ||
			!j.QueuedAt.Equal(want.QueuedAt) || !j.ExpiresAt.Equal(want.ExpiresAt) || j.Webhook != want.Webhook ||
			!bytes.Equal(j.S3Config, want.S3Config) {
			t.Errorf("Get(%s) = %+v; want %+v", want.ID, j, want)
		}
		if in, err := s.Input(ctx, want.ID); err != nil || !bytes.Equal(in, input(i)) {
			t.Errorf("Input(%s) = %s, %v; want %s", want.ID, in, err, input(i))
		}
	}
	missing := core.NewJobKey(false).String()
	if _, err := s.Get(ctx, missing); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Get(unknown) = %v; want ErrNotFound", err)
	}
	if _, err := s.Input(ctx, missing); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Input(unknown) = %v; want ErrNotFound", err)
	}
	if _, err := s.Update(ctx, missing, core.Statuses(core.InQueue), to(core.EvCancel, t0), false); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Update(unknown) = %v; want ErrNotFound", err)
	}
}

// jobsLargeInput: an input of several MiB, which a store may keep apart from its records
// (store/pebble keeps one of 1 MiB or more in a file), is read back and taken whole, and goes
// with its job.
func jobsLargeInput(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	big := append(append([]byte(`{"s":"`), bytes.Repeat([]byte("x"), 3<<20)...), `"}`...)
	j := newJob("ep", t0)
	j.ExpiresAt = t0.Add(time.Minute)
	if _, err := s.Insert(ctx, j, big, true); err != nil {
		t.Fatalf("Insert(%d-byte input) = %v; want nil", len(big), err)
	}
	if in, err := s.Input(ctx, j.ID); err != nil || !bytes.Equal(in, big) {
		t.Errorf("Input = %d bytes, %v; want the %d-byte input", len(in), err, len(big))
	}
	if got := take(t, s, "ep", "w", 1, t0); len(got) != 1 || !bytes.Equal(got[0].Input, big) {
		t.Fatalf("Take = %v; want the job with its %d-byte input", ids(got), len(big))
	}
	update(t, s, j.ID, core.EvDone, t0)
	if _, err := s.Expire(ctx, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Input(ctx, j.ID); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Input of an expired job = %v; want ErrNotFound", err)
	}
}

func jobsTakeOrder(t *testing.T, s core.JobStore) {
	var jobs []core.Job
	for i := range 3 {
		jobs = append(jobs, newJob("a", t0.Add(time.Duration(i)*time.Millisecond)))
	}
	jobs = append(jobs, newJob("b", t0))
	jobs = insert(t, s, jobs...)
	now := t0.Add(time.Second)
	got := take(t, s, "a", "w1", 2, now)
	if want := []string{jobs[0].ID, jobs[1].ID}; !slices.Equal(ids(got), want) {
		t.Fatalf("Take(a, 2) = %v; want %v", ids(got), want)
	}
	for i, tj := range got {
		if tj.Job.Status != core.InProgress || tj.Job.WorkerID != "w1" || !tj.Job.StartedAt.Equal(now) || !bytes.Equal(tj.Input, input(i)) {
			t.Errorf("taken %s = %+v, input %s; want IN_PROGRESS for w1 at %v, input %s", tj.Job.ID, tj.Job, tj.Input, now, input(i))
		}
		if j := get(t, s, tj.Job.ID); j.Status != core.InProgress || j.WorkerID != "w1" {
			t.Errorf("Get(%s) after take = %s by %q; want IN_PROGRESS by w1", j.ID, j.Status, j.WorkerID)
		}
	}
	if got := take(t, s, "a", "w2", 5, now); !slices.Equal(ids(got), []string{jobs[2].ID}) {
		t.Errorf("second Take(a, 5) = %v; want [%s]", ids(got), jobs[2].ID)
	}
	if got := take(t, s, "a", "w2", 5, now); len(got) != 0 {
		t.Errorf("Take(a) of an empty queue = %v; want none", ids(got))
	}
	if got := take(t, s, "nobody", "w2", 5, now); len(got) != 0 {
		t.Errorf("Take(unknown endpoint) = %v; want none", ids(got))
	}
	if j := get(t, s, jobs[3].ID); j.Status != core.InQueue {
		t.Errorf("endpoint b's job is %s after takes of a; want IN_QUEUE", j.Status)
	}
}

func jobsTakeSkipsExpired(t *testing.T, s core.JobStore) {
	short := newJob("ep", t0)
	short.ExpiresAt = t0.Add(time.Second)
	long := newJob("ep", t0)
	insert(t, s, short, long)
	if got := take(t, s, "ep", "w", 5, t0.Add(time.Second)); !slices.Equal(ids(got), []string{long.ID}) {
		t.Errorf("Take past the first job's expiry = %v; want only [%s]", ids(got), long.ID)
	}
}

// reach returns a job of the endpoint brought to status st.
func reach(t *testing.T, s core.JobStore, endpoint string, st core.JobStatus) core.Job {
	t.Helper()
	j := insert(t, s, newJob(endpoint, t0))[0]
	if st == core.InQueue {
		return j
	}
	if got := take(t, s, endpoint, "w", 1, t0); len(got) != 1 || got[0].Job.ID != j.ID {
		t.Fatalf("Take to reach %s = %v; want [%s]", st, ids(got), j.ID)
	}
	ev := map[core.JobStatus]core.Event{core.Completed: core.EvDone, core.Failed: core.EvFail,
		core.Cancelled: core.EvCancel, core.TimedOut: core.EvTimeout}[st]
	if ev != "" {
		return update(t, s, j.ID, ev, t0)
	}
	return get(t, s, j.ID)
}

func jobsTransitions(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	statuses := []core.JobStatus{core.InQueue, core.InProgress, core.Completed, core.Failed, core.Cancelled, core.TimedOut}
	events := []core.Event{core.EvDone, core.EvFail, core.EvProgress, core.EvCancel, core.EvPurge, core.EvTimeout,
		core.EvRequeue, core.EvLost, core.EvRelease, core.EvRetry} // EvTake is Take's
	for _, st := range statuses {
		for _, ev := range events {
			endpoint := fmt.Sprintf("%s-%s", st, ev) // its own queue
			j := reach(t, s, endpoint, st)
			want, allowed := core.Transitions[st][ev]
			got, err := s.Update(ctx, j.ID, core.From(ev), to(ev, t0.Add(time.Second)), false)
			if !allowed {
				var se *core.StateError
				if !errors.As(err, &se) || se.Status != st {
					t.Errorf("Update(%s job, %s) = %v; want a StateError with status %s", st, ev, err, st)
				}
				if after := get(t, s, j.ID); after.Status != st || !after.ExpiresAt.Equal(j.ExpiresAt) {
					t.Errorf("refused %s of a %s job left it %s expiring %v; want it unchanged", ev, st, after.Status, after.ExpiresAt)
				}
				continue
			}
			if err != nil || got.Status != want {
				t.Errorf("Update(%s job, %s) = %s, %v; want %s, nil", st, ev, got.Status, err, want)
				continue
			}
			if after := get(t, s, j.ID); after.Status != want {
				t.Errorf("Get after %s of a %s job = %s; want %s", ev, st, after.Status, want)
			}
			queued := take(t, s, endpoint, "w2", 5, t0.Add(time.Second))
			if wantTaken := want == core.InQueue; (len(queued) == 1) != wantTaken {
				t.Errorf("Take after %s of a %s job = %v; want the job taken: %v", ev, st, ids(queued), wantTaken)
			}
		}
	}
	// Only Take moves a job IN_PROGRESS.
	j := reach(t, s, "take-only", core.InQueue)
	if _, err := s.Update(ctx, j.ID, core.Statuses(core.InQueue), func(j *core.Job) error {
		j.Status = core.InProgress
		return nil
	}, false); err == nil {
		t.Errorf("Update moving a queued job IN_PROGRESS = nil; want an error (that is Take's)")
	}
}

func jobsLatePost(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	j := reach(t, s, "ep", core.InProgress)
	update(t, s, j.ID, core.EvCancel, t0)
	_, err := s.Update(ctx, j.ID, core.From(core.EvDone), func(j *core.Job) error {
		j.Status, j.Output = core.Completed, json.RawMessage(`"late"`)
		return nil
	}, true)
	var se *core.StateError
	if !errors.As(err, &se) || se.Status != core.Cancelled {
		t.Errorf("late done after cancel = %v; want a StateError with status CANCELLED", err)
	}
	if got := get(t, s, j.ID); got.Status != core.Cancelled || got.Output != nil {
		t.Errorf("after a late done the job is %s with output %s; want CANCELLED with none", got.Status, got.Output)
	}
}

func jobsChangeError(t *testing.T, s core.JobStore) {
	j := reach(t, s, "ep", core.InProgress)
	boom := errors.New("boom")
	_, err := s.Update(context.Background(), j.ID, core.Statuses(core.InProgress), func(j *core.Job) error {
		j.Status, j.Error = core.Failed, "half done"
		return boom
	}, false)
	if !errors.Is(err, boom) {
		t.Errorf("Update with a failing change = %v; want %v", err, boom)
	}
	if got := get(t, s, j.ID); got.Status != core.InProgress || got.Error != "" {
		t.Errorf("after a failed change the job is %s, error %q; want IN_PROGRESS, none", got.Status, got.Error)
	}
}

func jobsConcurrentTake(t *testing.T, s core.JobStore) {
	const n, takers = 300, 8
	jobs := make([]core.Job, n)
	for i := range jobs {
		jobs[i] = newJob("ep", t0)
	}
	insert(t, s, jobs...)
	var mu sync.Mutex
	seen := map[string]string{}
	var wg sync.WaitGroup
	for w := range takers {
		worker := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			for {
				got, err := s.Take(context.Background(), "ep", worker, 1+w%3, t0)
				if err != nil {
					t.Errorf("Take = %v; want nil", err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, tj := range got {
					if other, dup := seen[tj.Job.ID]; dup {
						t.Errorf("job %s taken by %s and %s", tj.Job.ID, other, worker)
					}
					seen[tj.Job.ID] = worker
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("%d jobs taken; want %d", len(seen), n)
	}
}

func jobsConcurrentUpdate(t *testing.T, s core.JobStore) {
	j := reach(t, s, "ep", core.InProgress)
	const racers = 8
	var wg sync.WaitGroup
	wins := make(chan int, racers)
	for i := range racers {
		wg.Go(func() {
			_, err := s.Update(context.Background(), j.ID, core.From(core.EvDone), func(j *core.Job) error {
				j.Status, j.Output = core.Completed, fmt.Appendf(nil, "%d", i)
				return nil
			}, false)
			var se *core.StateError
			switch {
			case err == nil:
				wins <- i
			case !errors.As(err, &se):
				t.Errorf("losing Update = %v; want a StateError", err)
			}
		})
	}
	wg.Wait()
	close(wins)
	var won []int
	for i := range wins {
		won = append(won, i)
	}
	if len(won) != 1 {
		t.Fatalf("%d of %d racing completions won; want exactly 1", len(won), racers)
	}
	if got := get(t, s, j.ID); string(got.Output) != fmt.Sprint(won[0]) {
		t.Errorf("output = %s; want the winner's %d", got.Output, won[0])
	}
}

func jobsRequeue(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	j := reach(t, s, "ep", core.InProgress)
	other := insert(t, s, newJob("ep", t0.Add(time.Millisecond)))[0]
	update(t, s, j.ID, core.EvRequeue, t0.Add(time.Second))
	if held, err := s.Held(ctx, "w"); err != nil || len(held) != 0 {
		t.Errorf("Held(w) after requeue = %v, %v; want none", held, err)
	}
	got := take(t, s, "ep", "w2", 5, t0.Add(2*time.Second))
	if want := []string{other.ID, j.ID}; !slices.Equal(ids(got), want) {
		t.Errorf("Take after requeue = %v; want %v (the requeued job at the back)", ids(got), want)
	}
}

// waitDone waits for done, failing the test after waitLimit.
func waitDone(t *testing.T, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s = %v; want nil", what, err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("%s did not return within %v", what, waitLimit)
	}
}

// parked starts fn and checks it has not returned before the caller acts: a wake-up that
// comes without a cause fails here, however late it would have come.
func parked(t *testing.T, fn func(ctx context.Context) error) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("returned %v before anything happened; want it to wait", err)
	case <-time.After(20 * time.Millisecond):
	}
	return done
}

func jobsWaitAvailable(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	done := parked(t, func(ctx context.Context) error { return s.WaitAvailable(ctx, "ep") })
	insert(t, s, newJob("other", t0))
	select {
	case err := <-done:
		t.Fatalf("WaitAvailable(ep) returned %v on another endpoint's insert; want it to wait", err)
	case <-time.After(20 * time.Millisecond):
	}
	insert(t, s, newJob("ep", t0))
	waitDone(t, "WaitAvailable(ep) after an insert", done)
	if err := s.WaitAvailable(ctx, "ep"); err != nil {
		t.Errorf("WaitAvailable(ep) with a job queued = %v; want nil at once", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.WaitAvailable(cctx, "empty"); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitAvailable with an ended context = %v; want context.Canceled", err)
	}
}

func jobsListenAvailable(t *testing.T, s core.JobStore) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	heard := make(chan string, 64)
	if err := s.ListenAvailable(ctx, func(endpoint string) {
		select {
		case heard <- endpoint:
		default:
		}
	}); err != nil {
		t.Fatalf("ListenAvailable = %v; want nil", err)
	}
	hear := func(what, want string) {
		t.Helper()
		select {
		case ep := <-heard:
			if ep != want {
				t.Errorf("after %s ListenAvailable heard %q; want %q", what, ep, want)
			}
		case <-time.After(waitLimit):
			t.Fatalf("after %s ListenAvailable heard nothing within %v", what, waitLimit)
		}
	}
	insert(t, s, newJob("ep", t0))
	hear("an insert", "ep")
	j := reach(t, s, "requeued", core.InProgress)
	hear("an insert", "requeued")
	update(t, s, j.ID, core.EvRequeue, t0)
	hear("a requeue", "requeued")
	cancel()
	// Once its context ends the listener is dropped: within waitLimit, inserts stop reaching it.
	deadline := time.Now().Add(waitLimit)
	for {
		for len(heard) > 0 {
			<-heard
		}
		insert(t, s, newJob("after", t0))
		select {
		case <-heard:
			if time.Now().After(deadline) {
				t.Fatalf("ListenAvailable still calls its fn %v after its context ended", waitLimit)
			}
			time.Sleep(time.Millisecond) // the drop is asynchronous
			continue
		case <-time.After(20 * time.Millisecond):
		}
		return
	}
}

func jobsWaitEnded(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	j := reach(t, s, "ep", core.InProgress)
	done := parked(t, func(ctx context.Context) error { return s.WaitEnded(ctx, j.ID) })
	if _, err := s.Update(ctx, j.ID, core.Statuses(core.InProgress), func(j *core.Job) error {
		j.Output = json.RawMessage(`"progress"`)
		return nil
	}, false); err != nil {
		t.Fatalf("progress Update = %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("WaitEnded returned %v on progress; want it to wait for the end", err)
	case <-time.After(20 * time.Millisecond):
	}
	update(t, s, j.ID, core.EvDone, t0)
	waitDone(t, "WaitEnded after the end", done)
	if err := s.WaitEnded(ctx, j.ID); err != nil {
		t.Errorf("WaitEnded of an ended job = %v; want nil at once", err)
	}
	if err := s.WaitEnded(ctx, core.NewJobKey(false).String()); err != nil {
		t.Errorf("WaitEnded of an unknown job = %v; want nil at once", err)
	}
}

func jobsStream(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	j := reach(t, s, "ep", core.InProgress)
	var se *core.StateError
	if _, err := s.AppendChunks(ctx, j.ID, "intruder", []core.StreamChunk{{Output: json.RawMessage(`1`)}}); !errors.As(err, &se) {
		t.Errorf("AppendChunks by a worker not holding the job = %v; want a StateError", err)
	}
	done := parked(t, func(ctx context.Context) error { return s.WaitChunks(ctx, j.ID) })
	n, err := s.AppendChunks(ctx, j.ID, "w", []core.StreamChunk{{Output: json.RawMessage(`"a"`)}, {Output: json.RawMessage(`"bc"`), Metrics: json.RawMessage(`{"t":1}`)}})
	if want := len(`"a"`) + len(`"bc"`) + len(`{"t":1}`); err != nil || n != want {
		t.Errorf("AppendChunks = %d, %v; want %d unread bytes", n, err, want)
	}
	waitDone(t, "WaitChunks after an append", done)
	if err := s.WaitChunks(ctx, j.ID); err != nil {
		t.Errorf("WaitChunks with chunks unread = %v; want nil at once", err)
	}
	if !get(t, s, j.ID).Streamed {
		t.Errorf("job not marked Streamed after AppendChunks")
	}
	got, err := s.DrainChunks(ctx, j.ID)
	if err != nil || len(got) != 2 || string(got[0].Output) != `"a"` || string(got[1].Metrics) != `{"t":1}` {
		t.Errorf("DrainChunks = %v, %v; want the two chunks in order", got, err)
	}
	if again, err := s.DrainChunks(ctx, j.ID); err != nil || len(again) != 0 {
		t.Errorf("second DrainChunks = %v, %v; want none (each chunk once)", again, err)
	}
	if _, err := s.AppendChunks(ctx, j.ID, "w", []core.StreamChunk{{Output: json.RawMessage(`"last"`)}}); err != nil {
		t.Fatal(err)
	}
	update(t, s, j.ID, core.EvDone, t0)
	if got, _ := s.DrainChunks(ctx, j.ID); len(got) != 1 {
		t.Errorf("DrainChunks after the end = %v; want the chunk sent before it", got)
	}
	if _, err := s.AppendChunks(ctx, j.ID, "w", []core.StreamChunk{{Output: json.RawMessage(`"late"`)}}); !errors.As(err, &se) || se.Status != core.Completed {
		t.Errorf("AppendChunks after the end = %v; want a StateError with status COMPLETED", err)
	}
}

// jobsStreamPeek: PeekChunks hands nothing out (a drain after it still gets every chunk), and
// drained chunks stay readable to it, the newest within core.MaxStreamKept bytes and
// core.MaxStreamKeptParts chunks.
func jobsStreamPeek(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	j := reach(t, s, "ep", core.InProgress)
	outs := func(cs []core.StreamChunk) string {
		var b strings.Builder
		for _, c := range cs {
			b.Write(c.Output)
		}
		return b.String()
	}
	if _, err := s.AppendChunks(ctx, j.ID, "w", []core.StreamChunk{{Output: json.RawMessage(`"a"`)}, {Output: json.RawMessage(`"b"`)}}); err != nil {
		t.Fatal(err)
	}
	peeked, err := s.PeekChunks(ctx, j.ID, 0)
	if err != nil || outs(peeked) != `"a""b"` || peeked[0].Seq <= 0 || peeked[1].Seq <= peeked[0].Seq {
		t.Fatalf("PeekChunks = %+v, %v; want both chunks with growing Seq", peeked, err)
	}
	if err := s.WaitChunks(ctx, j.ID); err != nil {
		t.Errorf("WaitChunks after a peek = %v; want nil at once (the chunks are still unread)", err)
	}
	if got, err := s.DrainChunks(ctx, j.ID); err != nil || outs(got) != `"a""b"` || got[1].Seq != peeked[1].Seq {
		t.Errorf("DrainChunks after a peek = %+v, %v; want both chunks (a peek takes nothing)", got, err)
	}
	if got, err := s.PeekChunks(ctx, j.ID, 0); err != nil || outs(got) != `"a""b"` {
		t.Errorf("PeekChunks after the drain = %+v, %v; want the delivered chunks still readable", got, err)
	}
	if got, err := s.PeekChunks(ctx, j.ID, peeked[0].Seq); err != nil || outs(got) != `"b"` {
		t.Errorf("PeekChunks after the first Seq = %+v, %v; want the second chunk only", got, err)
	}
	big := json.RawMessage(`"` + strings.Repeat("x", core.MaxStreamKept/2) + `"`)
	if _, err := s.AppendChunks(ctx, j.ID, "w", []core.StreamChunk{{Output: big}, {Output: big}, {Output: json.RawMessage(`"c"`)}}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.AppendChunks(ctx, j.ID, "w", []core.StreamChunk{{Output: json.RawMessage(`"d"`)}}); err != nil || n != 2*len(big)+6 {
		t.Errorf("AppendChunks = %d, %v; want %d unread bytes (delivered ones are not unread)", n, err, 2*len(big)+6)
	}
	if got, err := s.DrainChunks(ctx, j.ID); err != nil || len(got) != 4 {
		t.Fatalf("DrainChunks = %d chunks, %v; want 4", len(got), err)
	}
	ctx2, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.WaitChunks(ctx2, j.ID); err == nil {
		t.Errorf("WaitChunks with only delivered chunks = nil; want it to wait")
	}
	kept, err := s.PeekChunks(ctx, j.ID, 0)
	size := 0
	for _, c := range kept {
		size += len(c.Output) + len(c.Metrics)
	}
	if err != nil || size > core.MaxStreamKept || !strings.HasSuffix(outs(kept), `"c""d"`) || strings.HasPrefix(outs(kept), `"a"`) {
		t.Errorf("PeekChunks after %d bytes delivered = %d chunks, %d bytes, %v; want the newest within %d bytes",
			2*len(big)+10, len(kept), size, err, core.MaxStreamKept)
	}
	many := make([]core.StreamChunk, core.MaxStreamKeptParts+5)
	for i := range many {
		many[i].Output = json.RawMessage(fmt.Sprint(i))
	}
	if _, err := s.AppendChunks(ctx, j.ID, "w", many); err != nil {
		t.Fatal(err)
	}
	if got, err := s.DrainChunks(ctx, j.ID); err != nil || len(got) != len(many) {
		t.Fatalf("DrainChunks = %d chunks, %v; want %d", len(got), err, len(many))
	}
	if kept, err := s.PeekChunks(ctx, j.ID, 0); err != nil || len(kept) != core.MaxStreamKeptParts || string(kept[0].Output) != "5" {
		t.Errorf("PeekChunks after %d small chunks = %d chunks, %v; want the newest %d", len(many), len(kept), err, core.MaxStreamKeptParts)
	}
	update(t, s, j.ID, core.EvDone, t0)
	if got, err := s.PeekChunks(ctx, j.ID, 0); err != nil || !strings.HasSuffix(outs(got), fmt.Sprint(len(many)-1)) {
		t.Errorf("PeekChunks after the end = %d chunks, %v; want the kept chunks", len(got), err)
	}
}

func jobsExpire(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	queued := newJob("ep", t0)
	queued.ExpiresAt = t0.Add(time.Minute) // its ttl
	insert(t, s, queued)
	running := reach(t, s, "ep2", core.InProgress)
	ended := reach(t, s, "ep3", core.Completed) // expires at t0 + 30 min retention
	extended := reach(t, s, "ep4", core.Completed)
	if _, err := s.Update(ctx, extended.ID, core.Statuses(core.Completed), func(j *core.Job) error {
		j.ExpiresAt = t0.Add(2 * time.Hour) // a status read with a ttl
		return nil
	}, false); err != nil {
		t.Fatal(err)
	}
	waiter := parked(t, func(ctx context.Context) error { return s.WaitEnded(ctx, queued.ID) })
	expire := func(at time.Time, want ...string) []core.ExpiredJob {
		t.Helper()
		got, err := s.Expire(ctx, at)
		var gotIDs []string
		for _, x := range got {
			gotIDs = append(gotIDs, x.ID)
		}
		slices.Sort(gotIDs)
		slices.Sort(want)
		if err != nil || !slices.Equal(gotIDs, want) {
			t.Errorf("Expire(t0+%v) = %v, %v; want %v", at.Sub(t0), gotIDs, err, want)
		}
		return got
	}
	expire(t0.Add(time.Minute - time.Microsecond))
	expire(t0.Add(time.Minute), queued.ID)
	waitDone(t, "WaitEnded of a job that expired", waiter)
	for _, f := range []func(context.Context, string) error{
		func(ctx context.Context, id string) error { _, err := s.Get(ctx, id); return err },
		func(ctx context.Context, id string) error { _, err := s.Input(ctx, id); return err },
	} {
		if err := f(ctx, queued.ID); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("reading an expired job = %v; want ErrNotFound", err)
		}
	}
	if got := take(t, s, "ep", "w", 1, t0); len(got) != 0 {
		t.Errorf("Take after expiry = %v; want none", ids(got))
	}
	expire(t0.Add(30*time.Minute), ended.ID)
	expire(t0.Add(2*time.Hour), extended.ID)
	x := expire(running.ExpiresAt, running.ID)
	if len(x) == 1 && (x[0].WorkerID != "w" || x[0].Status != core.InProgress || x[0].Endpoint != "ep2") {
		t.Errorf("expired running job = %+v; want IN_PROGRESS on ep2 held by w", x[0])
	}
	if held, _ := s.Held(ctx, "w"); len(held) != 0 {
		t.Errorf("Held(w) after its job expired = %v; want none", held)
	}
}

func jobsOverdue(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	limited, open := newJob("ep", t0), newJob("ep", t0)
	limited.TimeoutMs = 1000
	insert(t, s, limited, open)
	take(t, s, "ep", "w", 2, t0)
	if got, err := s.Overdue(ctx, t0.Add(999*time.Millisecond)); err != nil || len(got) != 0 {
		t.Errorf("Overdue before the timeout = %v, %v; want none", got, err)
	}
	if got, err := s.Overdue(ctx, t0.Add(time.Second)); err != nil || !slices.Equal(got, []string{limited.ID}) {
		t.Errorf("Overdue at the timeout = %v, %v; want [%s]", got, err, limited.ID)
	}
	update(t, s, limited.ID, core.EvTimeout, t0.Add(time.Second))
	if got, _ := s.Overdue(ctx, t0.Add(time.Hour)); len(got) != 0 {
		t.Errorf("Overdue after the timeout was applied = %v; want none", got)
	}
}

func jobsList(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	var jobs []core.Job
	for i := range 5 {
		j := newJob("ep", t0.Add(time.Duration(i)*time.Second))
		if i == 3 {
			j.Owner = "bob"
		}
		jobs = append(jobs, j)
	}
	jobs = insert(t, s, jobs...)
	insert(t, s, newJob("other", t0))
	take(t, s, "ep", "w", 2, t0) // jobs 0 and 1
	update(t, s, jobs[0].ID, core.EvDone, t0)
	idsOf := func(js []core.Job) []string {
		var out []string
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	all, next, err := s.List(ctx, core.JobFilter{Endpoint: "ep"})
	if want := []string{jobs[4].ID, jobs[3].ID, jobs[2].ID, jobs[1].ID, jobs[0].ID}; err != nil || next != "" || !slices.Equal(idsOf(all), want) {
		t.Errorf("List(ep) = %v, %q, %v; want %v newest first, no cursor", idsOf(all), next, err, want)
	}
	queued, _, _ := s.List(ctx, core.JobFilter{Endpoint: "ep", Status: core.Statuses(core.InQueue)})
	if want := []string{jobs[4].ID, jobs[3].ID, jobs[2].ID}; !slices.Equal(idsOf(queued), want) {
		t.Errorf("List(ep, IN_QUEUE) = %v; want %v", idsOf(queued), want)
	}
	bobs, _, _ := s.List(ctx, core.JobFilter{Endpoint: "ep", Owner: "bob"})
	if want := []string{jobs[3].ID}; !slices.Equal(idsOf(bobs), want) {
		t.Errorf("List(ep, owner bob) = %v; want %v", idsOf(bobs), want)
	}
	var paged []string
	cursor := ""
	for range 10 {
		page, next, err := s.List(ctx, core.JobFilter{Endpoint: "ep", Cursor: cursor, Limit: 2})
		if err != nil || len(page) > 2 {
			t.Fatalf("List page = %d jobs, %v; want at most 2, nil", len(page), err)
		}
		paged = append(paged, idsOf(page)...)
		if cursor = next; cursor == "" {
			break
		}
	}
	if !slices.Equal(paged, idsOf(all)) {
		t.Errorf("List in pages of 2 = %v; want %v", paged, idsOf(all))
	}
	if none, _, err := s.List(ctx, core.JobFilter{Endpoint: "nowhere"}); err != nil || len(none) != 0 {
		t.Errorf("List(unknown endpoint) = %v, %v; want none", idsOf(none), err)
	}
	if _, _, err := s.List(ctx, core.JobFilter{Endpoint: "ep", Cursor: "not-a-cursor"}); !errors.Is(err, core.ErrBadCursor) {
		t.Errorf("List(bad cursor) error = %v; want one wrapping core.ErrBadCursor", err)
	}
}

func jobsPurge(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	running := reach(t, s, "ep", core.InProgress)
	a, b, c := newJob("ep", t0), newJob("ep", t0), newJob("ep", t0)
	b.Owner = "bob"
	insert(t, s, a, b, c)
	other := insert(t, s, newJob("other", t0))[0]
	cancel := func(j *core.Job) { _ = to(core.EvPurge, t0)(j) }
	if n, err := s.Purge(ctx, "ep", "bob", cancel, true); err != nil || n != 1 {
		t.Errorf("Purge(ep, bob) = %d, %v; want 1", n, err)
	}
	if n, err := s.Purge(ctx, "ep", "", cancel, true); err != nil || n != 2 {
		t.Errorf("Purge(ep) = %d, %v; want 2", n, err)
	}
	for _, id := range []string{a.ID, b.ID, c.ID} {
		if got := get(t, s, id); got.Status != core.Cancelled {
			t.Errorf("purged job is %s; want CANCELLED", got.Status)
		}
	}
	if got := get(t, s, running.ID); got.Status != core.InProgress {
		t.Errorf("running job after a purge is %s; want IN_PROGRESS", got.Status)
	}
	if got := get(t, s, other.ID); got.Status != core.InQueue {
		t.Errorf("another endpoint's job after a purge is %s; want IN_QUEUE", got.Status)
	}
	if got := take(t, s, "ep", "w", 5, t0); len(got) != 0 {
		t.Errorf("Take after a purge = %v; want none", ids(got))
	}
}

func jobsHeartbeats(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	insert(t, s, newJob("ep", t0), newJob("ep", t0), newJob("ep", t0))
	one := take(t, s, "ep", "w1", 2, t0)
	two := take(t, s, "ep", "w2", 1, t0)
	if err := s.Heartbeat(ctx, "w2", t0.Add(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, "idle", t0); err != nil {
		t.Fatal(err)
	}
	held, err := s.Held(ctx, "w1")
	slices.Sort(held)
	want := ids(one)
	slices.Sort(want)
	if err != nil || !slices.Equal(held, want) {
		t.Errorf("Held(w1) = %v, %v; want %v", held, err, want)
	}
	silent, err := s.Silent(ctx, t0.Add(10*time.Second))
	if err != nil || !slices.Equal(silent, []string{"w1"}) {
		t.Errorf("Silent(t0+10s) = %v, %v; want [w1] (w2 beat later; idle holds nothing)", silent, err)
	}
	if silent, _ := s.Silent(ctx, t0); len(silent) != 0 {
		t.Errorf("Silent(t0) = %v; want none (every worker was heard at t0)", silent)
	}
	for _, tj := range one { // the worker-lost rule
		update(t, s, tj.Job.ID, core.EvRequeue, t0.Add(time.Minute))
	}
	if silent, _ := s.Silent(ctx, t0.Add(time.Hour)); !slices.Equal(silent, []string{"w2"}) {
		t.Errorf("Silent after w1's jobs were taken back = %v; want [w2]", silent)
	}
	update(t, s, two[0].Job.ID, core.EvDone, t0)
	if err := s.ForgetWorker(ctx, "w2"); err != nil {
		t.Errorf("ForgetWorker = %v", err)
	}
	if silent, _ := s.Silent(ctx, t0.Add(time.Hour)); len(silent) != 0 {
		t.Errorf("Silent with no job held = %v; want none", silent)
	}
}

func jobsStats(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	var jobs []core.Job
	for i := range 4 {
		j := newJob("ep", t0.Add(time.Duration(i)*time.Second))
		j.Policy.LowPriority = i == 3
		jobs = append(jobs, j)
	}
	jobs = insert(t, s, jobs...)
	insert(t, s, newJob("other", t0))
	take(t, s, "ep", "w", 1, t0)                // job 0
	update(t, s, jobs[1].ID, core.EvCancel, t0) // job 1 leaves the queue
	low := newJob("ep", t0.Add(-time.Second))
	low.Policy.LowPriority = true
	plain := newJob("ep", t0.Add(time.Minute))
	insert(t, s, low, plain)
	same := func(got, want core.QueueStats) bool {
		return got.Queued == want.Queued && got.LowQueued == want.LowQueued && got.InProgress == want.InProgress &&
			got.Completed == want.Completed && got.Failed == want.Failed && got.OldestQueuedAt.Equal(want.OldestQueuedAt)
	}
	got, err := s.Stats(ctx, "ep")
	want := core.QueueStats{Queued: 4, LowQueued: 2, InProgress: 1, OldestQueuedAt: jobs[2].QueuedAt}
	if err != nil || !same(got, want) {
		t.Errorf("Stats(ep) = %+v, %v; want %+v", got, err, want)
	}
	update(t, s, take(t, s, "ep", "w", 1, t0)[0].Job.ID, core.EvDone, t0) // job 2
	got, _ = s.Stats(ctx, "ep")
	want = core.QueueStats{Queued: 3, LowQueued: 2, InProgress: 1, Completed: 1, OldestQueuedAt: plain.QueuedAt}
	if !same(got, want) {
		t.Errorf("Stats(ep) after a take and an end = %+v; want %+v (lowPriority jobs passed over)", got, want)
	}
	total, err := s.Stats(ctx, "")
	want = core.QueueStats{Queued: 4, LowQueued: 2, InProgress: 1, Completed: 1}
	if err != nil || !same(total, want) {
		t.Errorf("Stats(every endpoint) = %+v, %v; want %+v", total, err, want)
	}
	if got, err := s.Stats(ctx, "empty"); err != nil || got.Queued != 0 || !got.OldestQueuedAt.IsZero() {
		t.Errorf("Stats(unknown) = %+v, %v; want zero", got, err)
	}
}

// jobsStatsOldest: the oldest queued time follows takes, cancels, requeues and a queue that
// empties and fills again (a store may answer it from what it keeps of the queue's head).
func jobsStatsOldest(t *testing.T, s core.JobStore) {
	ctx := context.Background()
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	oldest := func(after string, want time.Time) {
		t.Helper()
		if st, err := s.Stats(ctx, "ep"); err != nil || !st.OldestQueuedAt.Equal(want) {
			t.Errorf("OldestQueuedAt after %s = %v, %v; want %v", after, st.OldestQueuedAt, err, want)
		}
	}
	ab := insert(t, s, newJob("ep", at(1)), newJob("ep", at(2)))
	oldest("two inserts", at(1))
	first := take(t, s, "ep", "w", 1, t0)
	oldest("a take", at(2))
	update(t, s, ab[1].ID, core.EvCancel, t0)
	insert(t, s, newJob("ep", at(3)))
	oldest("the head's job cancelled", at(3))
	take(t, s, "ep", "w", 1, t0)
	oldest("the queue emptied", time.Time{})
	d := insert(t, s, newJob("ep", at(4)))
	oldest("an insert into the empty queue", at(4))
	update(t, s, d[0].ID, core.EvCancel, t0)
	insert(t, s, newJob("ep", at(5)))
	oldest("a cancel, then an insert", at(5))
	update(t, s, first[0].Job.ID, core.EvRequeue, at(6))
	oldest("a requeue behind it", at(5))
	take(t, s, "ep", "w", 1, t0)
	oldest("a take leaving the requeued job", at(6))
	take(t, s, "ep", "w", 1, t0)
	oldest("the last take", time.Time{})
}
