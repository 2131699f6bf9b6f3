package core_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/store/memq"
	"github.com/gantryhq/gantry/store/pebble"
)

// sharedStore is a job store that shares workers as the PostgreSQL one does, in memory: two
// engines over it are two replicas on one database.
type sharedStore struct {
	*memq.Store
	mu     sync.Mutex
	notes  map[string]core.SharedActivity
	beats  map[string]time.Time
	epoch  int64
	figs   map[string]core.WorkerFigures
	writes int // NoteWorker calls
}

func (s *sharedStore) NoteWorker(_ context.Context, worker string, n core.WorkerNote, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	a := s.notes[worker]
	a.Worker = worker
	if n.Polled {
		a.Polls++
		a.PolledAt = at
	}
	a.StopPod = a.StopPod || n.StopPod
	if n.Unhealthy != "" {
		a.Unhealthy = n.Unhealthy
	}
	s.notes[worker] = a
	return nil
}

func (s *sharedStore) Heartbeat(ctx context.Context, worker string, at time.Time) error {
	s.mu.Lock()
	s.beats[worker] = at
	s.mu.Unlock()
	return s.Store.Heartbeat(ctx, worker, at)
}

func (s *sharedStore) SharedActivity(ctx context.Context, workers []string) ([]core.SharedActivity, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []core.SharedActivity
	for _, w := range workers {
		a, ok := s.notes[w]
		if !ok {
			continue
		}
		held, err := s.Store.Held(ctx, w)
		if err != nil {
			return nil, err
		}
		a.Held, a.Seen = held, s.beats[w]
		out = append(out, a)
	}
	return out, nil
}

func (s *sharedStore) PublishFigures(_ context.Context, epoch int64, figs map[string]core.WorkerFigures) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch < s.epoch {
		return nil
	}
	if epoch > s.epoch {
		s.epoch, s.figs = epoch, map[string]core.WorkerFigures{}
	}
	for ep, f := range figs {
		s.figs[ep] = f
	}
	return nil
}

func (s *sharedStore) ReadFigures(context.Context) (map[string]core.WorkerFigures, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]core.WorkerFigures{}
	for ep, f := range s.figs {
		out[ep] = f
	}
	return out, nil
}

// newSharedStore returns a clock, a Pebble store and a shared job store over it (closed when
// the test ends), and a silent logger: engines over the store are replicas on one database.
func newSharedStore(t *testing.T) (*testkit.Clock, *pebble.Store, *sharedStore, *slog.Logger) {
	t.Helper()
	clk := testkit.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	st, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	mq, err := st.Jobs(memq.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	store := &sharedStore{Store: mq, notes: map[string]core.SharedActivity{}, beats: map[string]time.Time{}}
	return clk, st, store, slog.New(slog.NewTextHandler(io.Discard, nil))
}

// TestWorkerHeardElsewhere: replica A registers a worker that polls and posts through replica
// B only. A hears of its first poll (WorkerReady) and of the jobs it holds at its next tick;
// it refuses to suspend the worker while it holds a job taken through B, even one B handed
// out since A last looked; a job B handed to the worker as A stops it goes back to the queue;
// B notes the worker's polls without a write per job; B's /health shows A's figures.
func TestWorkerHeardElsewhere(t *testing.T) {
	t.Parallel()
	clk, _, store, log := newSharedStore(t)
	a := core.NewJobs(core.JobsConfig{Store: store, Clock: clk, Log: log})
	b := core.NewJobs(core.JobsConfig{Store: store, Clock: clk, Log: log})
	a.ShareFigures(func() (int64, bool) { return 1, true })
	b.ShareFigures(func() (int64, bool) { return 1, false })
	signals := a.SubscribeWorkers()
	ep := &core.Endpoint{ID: "ep1", Owner: "alice", TimeoutMs: 60000}
	a.RegisterWorker(ep.ID, "w")
	takeAtB := func() core.Taken {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		got := b.Take(ctx, ep.ID, "w", 1)
		if len(got) != 1 {
			t.Fatalf("Take at B = %d jobs; want 1", len(got))
		}
		return got[0]
	}
	tick := func() {
		clk.Advance(core.SharedRefresh)
		a.Tick(t.Context(), clk.Now())
		b.Tick(t.Context(), clk.Now())
	}
	submit := func() core.Job {
		t.Helper()
		j, err := b.Submit(t.Context(), ep, core.Submission{Input: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}

	j1 := submit()
	if tk := takeAtB(); tk.ID != j1.ID {
		t.Fatalf("took %s; want %s", tk.ID, j1.ID)
	}
	if st, _ := a.WorkerStatus("w"); st.Polled || st.Busy != 0 {
		t.Fatalf("A's view before its tick = %+v; want not polled, idle", st)
	}
	tick()
	if st, _ := a.WorkerStatus("w"); !st.Polled || st.Busy != 1 {
		t.Fatalf("A's view after its tick = %+v; want polled, busy with the job taken at B", st)
	}
	if sig := signals.Take(nil); len(sig) != 1 || sig[0].Kind != core.WorkerReady || sig[0].Worker != "w" {
		t.Fatalf("A's signals = %+v; want w ready", sig)
	}
	if a.SuspendWorker(t.Context(), "w") {
		t.Fatal("SuspendWorker while the worker runs a job taken at B = true; want false")
	}
	if ha, hb := a.Health(t.Context(), ep.ID), b.Health(t.Context(), ep.ID); ha.Running != 1 || hb.Running != 1 || hb.Idle != 0 {
		t.Fatalf("Health running/idle on A = %d/%d, on B = %d/%d; want 1/0 on both", ha.Running, ha.Idle, hb.Running, hb.Idle)
	}

	// The job ends through B; A sees the worker idle at its next tick.
	if err := b.Done(t.Context(), ep.ID, "w", j1.ID, core.Result{Output: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	tick()
	if st, _ := a.WorkerStatus("w"); st.Busy != 0 || !st.IdleSince.Equal(clk.Now()) {
		t.Fatalf("A's view after the job ended at B = %+v; want idle since now", st)
	}
	if hb := b.Health(t.Context(), ep.ID); hb.Running != 0 || hb.Idle != 1 {
		t.Fatalf("Health on B = %+v; want 1 idle", hb)
	}

	// B hands the worker a job A has not heard of yet: A's suspension asks the store.
	j2 := submit()
	takeAtB()
	if a.SuspendWorker(t.Context(), "w") {
		t.Fatal("SuspendWorker after a take at B that A did not merge yet = true; want false")
	}
	if err := b.Done(t.Context(), ep.ID, "w", j2.ID, core.Result{Output: []byte(`2`)}); err != nil {
		t.Fatal(err)
	}
	tick()
	if !a.SuspendWorker(t.Context(), "w") {
		t.Fatal("SuspendWorker of the idle worker = false; want true")
	}
	// The race: B hands it a job as A stops it. The job goes back to the queue, one retry
	// spent; nothing is lost.
	j3 := submit()
	takeAtB()
	a.ForgetWorker(t.Context(), "w")
	got, err := a.Get(t.Context(), core.JobRef{Endpoint: ep.ID, ID: j3.ID}, 0)
	if err != nil || got.Status != core.InQueue || got.Retries != 1 {
		t.Fatalf("the job taken at B as A stopped the worker = %s retries %d, %v; want IN_QUEUE, 1 retry", got.Status, got.Retries, err)
	}

	// B wrote a note for the first poll only (the polls came within notePollEvery): no write
	// per job.
	store.mu.Lock()
	writes := store.writes
	store.mu.Unlock()
	if writes != 1 {
		t.Errorf("B noted the worker %d times; want 1", writes)
	}
}

// TestOrphanedWebhookDeliveredByLeader: replica A ends a job whose webhook delivery never
// finishes (A died with it in flight). The leader, B, delivers it once it is orphaned
// (WebhookOrphanAfter after the job ended), not before, and only once per that interval; a
// follower never does.
func TestOrphanedWebhookDeliveredByLeader(t *testing.T) {
	t.Parallel()
	clk, st, store, log := newSharedStore(t)
	newHooks := func() *notifications {
		return &notifications{sent: map[string][]byte{}, got: make(chan string, 16), delivered: make(chan string, 16), refused: make(chan string, 16)}
	}
	hooksA, hooksB, hooksC := newHooks(), newHooks(), newHooks()
	hooksA.hold.Store(true) // A's delivery never completes
	a := core.NewJobs(core.JobsConfig{Store: store, Clock: clk, Log: log, Notify: hooksA})
	b := core.NewJobs(core.JobsConfig{Store: store, Clock: clk, Log: log, Notify: hooksB})
	c := core.NewJobs(core.JobsConfig{Store: store, Clock: clk, Log: log, Notify: hooksC})
	a.ShareFigures(func() (int64, bool) { return 1, false })
	b.ShareFigures(func() (int64, bool) { return 1, true })
	c.ShareFigures(func() (int64, bool) { return 1, false })
	ep := &core.Endpoint{ID: "ep1", Owner: "alice", TimeoutMs: 60000}
	a.RegisterWorker(ep.ID, "w")
	j, err := a.Submit(t.Context(), ep, core.Submission{Input: []byte(`{}`), Webhook: "http://hook.test/orphan"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if got := a.Take(ctx, ep.ID, "w", 1); len(got) != 1 {
		t.Fatalf("Take = %d jobs; want 1", len(got))
	}
	if err := a.Done(t.Context(), ep.ID, "w", j.ID, core.Result{Output: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	<-hooksA.got // in flight at A, never delivered
	tick := func(d time.Duration) {
		now := clk.Advance(d)
		b.Tick(t.Context(), now)
		c.Tick(t.Context(), now)
	}
	tick(time.Minute) // not orphaned yet: A may still be retrying
	if n := b.WebhooksOffered(); n != 0 {
		t.Fatalf("the leader offered %d webhooks a minute after the job ended; want it left to A", n)
	}
	tick(core.WebhookOrphanAfter)
	if n, m := b.WebhooksOffered(), c.WebhooksOffered(); n != 1 || m != 0 {
		t.Fatalf("webhooks offered again by the leader, a follower = %d, %d; want 1, 0", n, m)
	}
	select {
	case u := <-hooksB.got:
		if u != "http://hook.test/orphan" {
			t.Fatalf("the leader delivered %s; want the orphaned webhook", u)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the leader did not deliver the orphaned webhook")
	}
	<-hooksB.delivered
	testkit.Eventually(t, "the delivery mark to be cleared", func() bool {
		rec, err := st.GetJob(j.ID)
		return err == nil && !rec.WebhookPending
	})
	tick(core.WebhookOrphanAfter) // delivered: not again
	if n := b.WebhooksOffered(); n != 0 {
		t.Fatalf("the leader offered %d webhooks after the delivery; want none", n)
	}
	if len(hooksB.got) != 0 || len(hooksC.got) != 0 {
		t.Fatalf("deliveries after the first: leader %d, follower %d; want none", len(hooksB.got), len(hooksC.got))
	}
}
