package memq_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/memq"
)

// The job store suite runs on memq in the in-memory backend's storetest.RunAll
// (store/memory's TestStores) and under Pebble's records in the embedded backend's
// (store/pebble's TestStores).

// TestOpenLoadsStoredJobs: a store opened over records that hold jobs queues them again in
// their order, keeps running ones held (and in their queue place, for a restart that puts
// them back), and deletes expired ones.
func TestOpenLoadsStoredJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	recs := memq.NewRecords()
	s := openAt(t, recs, t0)
	var ids []string
	for i := range 4 {
		j := core.Job{ID: core.NewJobKey(false).String(), Endpoint: "ep", Status: core.InQueue,
			QueuedAt: t0, ExpiresAt: t0.Add(time.Hour)}
		if i == 3 {
			j.ExpiresAt = t0.Add(time.Minute)
		}
		if _, err := s.Insert(ctx, j, []byte(`{}`), true); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	if got, err := s.Take(ctx, "ep", "w", 1, t0); err != nil || len(got) != 1 || got[0].Job.ID != ids[0] {
		t.Fatalf("Take = %v, %v; want job 0", got, err)
	}

	s = openAt(t, recs, t0.Add(time.Minute)) // a restart
	if _, err := recs.GetJob(ids[3]); err == nil {
		t.Errorf("expired job still stored after Open")
	}
	if held, err := s.Held(ctx, "w"); err != nil || len(held) != 1 || held[0] != ids[0] {
		t.Errorf("Held(w) after Open = %v, %v; want [job 0]", held, err)
	}
	if _, err := s.Update(ctx, ids[0], core.Statuses(core.InProgress), func(j *core.Job) error {
		j.Status, j.WorkerID = core.InQueue, "" // the worker-lost rule
		return nil
	}, true); err != nil {
		t.Fatal(err)
	}
	got, err := s.Take(ctx, "ep", "w2", 5, t0.Add(time.Minute))
	var order []string
	for _, tj := range got {
		order = append(order, tj.Job.ID)
	}
	if want := ids[:3]; err != nil || !slices.Equal(order, want) {
		t.Errorf("Take after Open = %v, %v; want %v (the running job back in its turn)", order, err, want)
	}
}

// TestOpenOldestSkipsRunningJobs: after a restart, the keys of running jobs keep their place in
// the queue, and the oldest queued time is not theirs.
func TestOpenOldestSkipsRunningJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	recs := memq.NewRecords()
	s := openAt(t, recs, t0)
	for i := range 2 {
		j := core.Job{ID: core.NewJobKey(false).String(), Endpoint: "ep", Status: core.InQueue,
			QueuedAt: t0.Add(time.Duration(i) * time.Second), ExpiresAt: t0.Add(time.Hour)}
		if _, err := s.Insert(ctx, j, []byte(`{}`), true); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.Take(ctx, "ep", "w", 1, t0); err != nil || len(got) != 1 {
		t.Fatalf("Take = %v, %v; want a job", got, err)
	}
	s = openAt(t, recs, t0) // a restart
	if st, err := s.Stats(ctx, "ep"); err != nil || !st.OldestQueuedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("Stats after Open = %+v, %v; want the queued job's time, not the running one's", st, err)
	}
}

// TestTakeFailureLosesNoJob: a take whose record read fails leaves the job queued at the head,
// taken by the next take, and the oldest queued time still names it.
func TestTakeFailureLosesNoJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	recs := &failingRecords{Records: memq.NewRecords()}
	s, err := memq.Open(recs, memq.Options{HotBytes: -1}) // no hot copies: every take reads
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 2 {
		j := core.Job{ID: core.NewJobKey(false).String(), Endpoint: "ep", Status: core.InQueue,
			QueuedAt: t0.Add(time.Duration(i) * time.Second), ExpiresAt: t0.Add(time.Hour)}
		if _, err := s.Insert(ctx, j, []byte(`{}`), false); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	recs.fail.Store(true)
	if got, err := s.Take(ctx, "ep", "w", 2, t0); err == nil || len(got) != 0 {
		t.Fatalf("Take with failing reads = %d jobs, %v; want none and an error", len(got), err)
	}
	recs.fail.Store(false)
	if st, err := s.Stats(ctx, "ep"); err != nil || st.Queued != 2 || !st.OldestQueuedAt.Equal(t0) {
		t.Errorf("Stats after the failed take = %+v, %v; want both queued, the oldest at job 0's time", st, err)
	}
	got, err := s.Take(ctx, "ep", "w", 2, t0)
	var order []string
	for _, tj := range got {
		order = append(order, tj.Job.ID)
	}
	if err != nil || !slices.Equal(order, ids) {
		t.Errorf("Take after the failure = %v, %v; want %v", order, err, ids)
	}
}

// failingRecords fails every record read while fail is set.
type failingRecords struct {
	*memq.Records
	fail atomic.Bool
}

func (r *failingRecords) GetJob(id string) (*core.Job, error) {
	if r.fail.Load() {
		return nil, errors.New("disk read failed")
	}
	return r.Records.GetJob(id)
}

// openAt opens a store over recs whose clock reads now.
func openAt(t *testing.T, recs *memq.Records, now time.Time) *memq.Store {
	t.Helper()
	s, err := memq.Open(recs, memq.Options{Clock: fixed(now)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type fixed time.Time

func (f fixed) Now() time.Time { return time.Time(f) }

// TestEntryPacksItsFields: an index entry's packed fields read back as written, at their
// limits too.
func TestEntryPacksItsFields(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		seq  uint64
		ep   uint32
		st   uint8
		low  bool
		next uint8
	}{{1, 0, 1, false, 2}, {memq.MaxSeq, memq.MaxEp, 6, true, 3}, {12345, 678, 2, true, 5}} {
		seq, ep, st, low := memq.EntryFields(c.seq, c.ep, c.st, c.low, 0)
		if seq != c.seq || ep != c.ep || st != c.st || low != c.low {
			t.Errorf("entry(%d, %d, %d, %v) reads %d, %d, %d, %v", c.seq, c.ep, c.st, c.low, seq, ep, st, low)
		}
		seq, ep, st, low = memq.EntryFields(c.seq, c.ep, c.st, c.low, c.next)
		if seq != c.seq || ep != c.ep || st != c.next || low != c.low {
			t.Errorf("entry(%d, %d, %d, %v) set to state %d reads %d, %d, %d, %v", c.seq, c.ep, c.st, c.low, c.next, seq, ep, st, low)
		}
	}
}

// TestQueueKeepsOrderAcrossBlocks: a queue longer than one block of keys hands its jobs out in
// order, and its oldest job counts after the keys of cancelled ones at its head are dropped.
func TestQueueKeepsOrderAcrossBlocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	s, err := memq.Open(memq.NewRecords(), memq.Options{HotBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2500 // two blocks and a half
	var ids []string
	for i := range n {
		j := core.Job{ID: core.NewJobKey(false).String(), Endpoint: "ep", Status: core.InQueue,
			QueuedAt: t0.Add(time.Duration(i) * time.Millisecond), ExpiresAt: t0.Add(time.Hour)}
		if _, err := s.Insert(ctx, j, []byte(`{}`), false); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	cancel := func(j *core.Job) error { j.Status = core.Cancelled; return nil }
	for _, id := range ids[:1100] { // more than a block of keys to drop
		if _, err := s.Update(ctx, id, core.Statuses(core.InQueue), cancel, false); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 { // Stats drops a bounded number of keys a read
		if st, _ := s.Stats(ctx, "ep"); !st.OldestQueuedAt.IsZero() {
			break
		}
	}
	if st, err := s.Stats(ctx, "ep"); err != nil || !st.OldestQueuedAt.Equal(t0.Add(1100*time.Millisecond)) {
		t.Errorf("Stats = %+v, %v; want the oldest at job 1100's time", st, err)
	}
	var got []string
	for len(got) < n-1100 {
		taken, err := s.Take(ctx, "ep", "w", 7, t0)
		if err != nil || len(taken) == 0 {
			t.Fatalf("Take after %d = %d jobs, %v; want more", len(got), len(taken), err)
		}
		for _, tj := range taken {
			got = append(got, tj.Job.ID)
		}
	}
	if !slices.Equal(got, ids[1100:]) {
		t.Errorf("jobs taken out of order")
	}
}

// A runsync job's input stays in memory while its runsync waits: the records hold the record
// but not the input, takes (a first one and one after a requeue) hand it out, and KeepInput
// stores it. At the end it is stored only for a job that may be retried (FAILED, TIMED_OUT) or
// has a webhook. A restart deletes an unfinished runsync job whose input was never stored,
// and keeps one whose input was.
func TestRunSyncInputKeptInMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	recs := memq.NewRecords()
	s := openAt(t, recs, t0)
	insert := func(webhook string) string {
		t.Helper()
		j := core.Job{ID: core.NewJobKey(true).String(), Endpoint: "ep", Status: core.InQueue, Sync: true,
			Webhook: webhook, QueuedAt: t0, ExpiresAt: t0.Add(time.Hour)}
		if _, err := s.Insert(ctx, j, []byte(`{"big":1}`), false); err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	stored := func(id string) bool {
		_, err := recs.Input(id)
		return err == nil
	}
	end := func(id string, to core.JobStatus) {
		t.Helper()
		if _, err := s.Update(ctx, id, core.Statuses(core.InProgress), func(j *core.Job) error { j.Status = to; return nil }, false); err != nil {
			t.Fatalf("ending %s as %s: %v", id, to, err)
		}
	}
	takeInput := func(id string) {
		t.Helper()
		got, err := s.Take(ctx, "ep", "w", 1, t0)
		if err != nil || len(got) != 1 || got[0].Job.ID != id || string(got[0].Input) != `{"big":1}` {
			t.Fatalf("Take = %+v, %v; want job %s with its input", got, err, id)
		}
	}

	completed, failed, hooked, kept, lost := insert(""), insert(""), insert("http://127.0.0.1:1/h"), insert(""), insert("")
	for _, id := range []string{completed, failed, hooked, kept, lost} {
		if stored(id) {
			t.Fatalf("job %s's input stored at insert; want it in memory only", id)
		}
		if in, err := s.Input(ctx, id); err != nil || string(in) != `{"big":1}` {
			t.Fatalf("Input(%s) = %s, %v; want the input", id, in, err)
		}
	}
	takeInput(completed)
	// Back to the queue (its worker was lost) and taken again: the input is still there.
	if _, err := s.Update(ctx, completed, core.Statuses(core.InProgress), func(j *core.Job) error { j.Status = core.InQueue; return nil }, false); err != nil {
		t.Fatal(err)
	}
	takeInput(failed)
	takeInput(hooked)
	takeInput(kept)
	takeInput(lost)
	takeInput(completed)
	end(completed, core.Completed)
	end(failed, core.Failed)
	end(hooked, core.Completed)
	if stored(completed) {
		t.Errorf("a COMPLETED runsync job's input was stored; want it dropped")
	}
	if !stored(failed) || !stored(hooked) {
		t.Errorf("input stored: FAILED %v, with a webhook %v; want both (a retry or the webhook reads it)", stored(failed), stored(hooked))
	}
	if err := s.KeepInput(ctx, kept); err != nil || !stored(kept) {
		t.Fatalf("KeepInput = %v, stored %v; want the input stored", err, stored(kept))
	}

	s = openAt(t, recs, t0) // a restart
	if _, err := s.Get(ctx, lost); err == nil {
		t.Errorf("the unfinished runsync job whose input was in memory only is still there after a restart")
	}
	if j, err := s.Get(ctx, kept); err != nil || j.Status != core.InProgress {
		t.Errorf("Get(kept) = %v, %v; want the job, IN_PROGRESS, after a restart", j.Status, err)
	}
	if in, err := s.Input(ctx, failed); err != nil || string(in) != `{"big":1}` {
		t.Errorf("Input(failed) after a restart = %s, %v; want the input", in, err)
	}
}
