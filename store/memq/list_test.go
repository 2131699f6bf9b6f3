package memq_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/memq"
)

// countingRecords counts record reads.
type countingRecords struct {
	*memq.Records
	reads atomic.Int64
}

func (r *countingRecords) GetJob(id string) (*core.Job, error) {
	r.reads.Add(1)
	return r.Records.GetJob(id)
}

// A page of a list looks at its own jobs and one more, never at another endpoint's backlog
// or, on an endpoint several users share (a ready-made model's), at another user's: the
// index entries List visits and the records it reads are counted. Before the per-endpoint,
// per-owner index, each list walked every job of the store, and read every candidate's
// record on a shared endpoint to filter by owner.
func TestListCostsItsPageNotTheBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	recs := &countingRecords{Records: memq.NewRecords()}
	s, err := memq.Open(recs, memq.Options{HotBytes: -1}) // no hot copies: each record listed is read
	if err != nil {
		t.Fatal(err)
	}
	const backlog = 3000
	quiet := insertJobs(t, s, "quiet", "bob", 3, t0)
	yours := insertJobs(t, s, "model", "yolanda", 3, t0) // older than the backlog: a walk from the newest passes it all
	insertJobs(t, s, "busy", "alice", backlog, t0)
	xs := insertJobs(t, s, "model", "xavier", backlog, t0)
	// Some of the backlog ends: it moves to the owner's list of ended jobs.
	for _, id := range xs[backlog-10:] {
		if _, err := s.Update(ctx, id, core.Statuses(core.InQueue), func(j *core.Job) error {
			j.Status = core.Cancelled
			return nil
		}, false); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		name      string
		f         core.JobFilter
		want      []string // newest first
		more      bool     // a cursor comes back
		maxVisits int64
	}{
		{"another endpoint's page", core.JobFilter{Endpoint: "quiet", Limit: 2}, []string{quiet[2], quiet[1]}, true, 3},
		{"another endpoint's last page", core.JobFilter{Endpoint: "quiet", Limit: 5}, []string{quiet[2], quiet[1], quiet[0]}, false, 3},
		{"another user's jobs on a shared endpoint", core.JobFilter{Endpoint: "model", Owner: "yolanda", Limit: 2},
			[]string{yours[2], yours[1]}, true, 3},
		{"the backlog's own page", core.JobFilter{Endpoint: "model", Owner: "xavier", Status: core.Statuses(core.Cancelled), Limit: 4},
			[]string{xs[backlog-1], xs[backlog-2], xs[backlog-3], xs[backlog-4]}, true, 5},
		{"the backlog's queued jobs", core.JobFilter{Endpoint: "model", Owner: "xavier", Status: core.Statuses(core.InQueue), Limit: 2},
			[]string{xs[backlog-11], xs[backlog-12]}, true, 3}, // the 10 cancelled ones are in the ended list
		{"ended jobs beside a queue", core.JobFilter{Endpoint: "busy", Status: core.Statuses(core.Completed, core.Cancelled), Limit: 5},
			[]string{}, false, 0},
		{"a busy endpoint's page", core.JobFilter{Endpoint: "busy", Limit: 50}, nil, true, 51},
	} {
		visits, reads := s.ListVisits(), recs.reads.Load()
		jobs, next, err := s.List(ctx, tc.f)
		if err != nil {
			t.Fatalf("%s: List = %v", tc.name, err)
		}
		visits, reads = s.ListVisits()-visits, recs.reads.Load()-reads
		if tc.want != nil {
			got := []string{}
			for _, j := range jobs {
				got = append(got, j.ID)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("%s: List = %v; want %v", tc.name, got, tc.want)
			}
		} else if len(jobs) != tc.f.Limit {
			t.Errorf("%s: List = %d jobs; want %d", tc.name, len(jobs), tc.f.Limit)
		}
		if (next != "") != tc.more {
			t.Errorf("%s: next cursor = %q; want one: %v", tc.name, next, tc.more)
		}
		if visits > tc.maxVisits || reads > int64(len(jobs)) {
			t.Errorf("%s: List looked at %d jobs and read %d records for a page of %d; want at most %d and %d",
				tc.name, visits, reads, len(jobs), tc.maxVisits, len(jobs))
		}
	}
}

// Jobs removed from under a list (expired) leave its index: a page after they expire
// neither returns nor visits them, and the index holds nothing for them, on an endpoint of
// one owner and on one shared by several (whose jobs' owners are read from their records).
func TestListIndexForgetsExpiredJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	s, err := memq.Open(memq.NewRecords(), memq.Options{HotBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	old := insertJobs(t, s, "model", "xavier", 300, t0)
	insertJobs(t, s, "model", "yolanda", 300, t0)
	insertJobs(t, s, "own", "alice", 300, t0)
	fresh := core.Job{ID: core.NewJobKey(false).String(), Endpoint: "model", Owner: "xavier", Status: core.InQueue,
		QueuedAt: t0, ExpiresAt: t0.Add(48 * time.Hour)}
	if _, err := s.Insert(ctx, fresh, nil, false); err != nil {
		t.Fatal(err)
	}
	if gone, err := s.Expire(ctx, t0.Add(25*time.Hour)); err != nil || len(gone) != 900 {
		t.Fatalf("Expire = %d jobs, %v; want 900", len(gone), err)
	}
	before := s.ListVisits()
	jobs, next, err := s.List(ctx, core.JobFilter{Endpoint: "model", Owner: "xavier", Limit: 10})
	if err != nil || len(jobs) != 1 || jobs[0].ID != fresh.ID || next != "" {
		t.Errorf("List after expiry = %d jobs, %q, %v; want the one job left", len(jobs), next, err)
	}
	if v := s.ListVisits() - before; v != 1 {
		t.Errorf("List after expiry looked at %d jobs; want 1 (the %d expired ones, e.g. %s, are out of the index)", v, len(old), old[0])
	}
	for _, ep := range []string{"own", "model"} {
		if jobs, _, _ := s.List(ctx, core.JobFilter{Endpoint: ep}); ep == "own" && len(jobs) != 0 {
			t.Errorf("List(%s) after expiry = %d jobs; want none", ep, len(jobs))
		}
	}
	if v := s.ListVisits() - before; v != 2 {
		t.Errorf("Lists after expiry looked at %d jobs; want 2", v)
	}
}

// Lists beside a stream of inserts and takes on the same endpoint see every job that was
// queued before they began, once each, newest first (run with -race).
func TestListBesideInsertsAndTakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	s, err := memq.Open(memq.NewRecords(), memq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	base := insertJobs(t, s, "ep", "alice", 500, t0)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	defer func() { close(stop); wg.Wait() }()
	for w := range 2 {
		wg.Go(func() {
			for range 2000 {
				select {
				case <-stop:
					return
				default:
				}
				j := core.Job{ID: core.NewJobKey(false).String(), Endpoint: "ep", Owner: "alice", Status: core.InQueue,
					QueuedAt: t0, ExpiresAt: t0.Add(time.Hour)}
				if _, err := s.Insert(ctx, j, []byte(`{}`), false); err != nil {
					t.Error(err)
					return
				}
				if _, err := s.Take(ctx, "ep", fmt.Sprint("w", w), 1, t0); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 20 {
		seen := map[string]bool{}
		last := uint64(0)
		cursor := ""
		for {
			page, next, err := s.List(ctx, core.JobFilter{Endpoint: "ep", Cursor: cursor, Limit: 37})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range page {
				if seen[j.ID] || (last != 0 && j.Seq >= last) {
					t.Fatalf("job %s (seq %d) listed twice or out of order after seq %d", j.ID, j.Seq, last)
				}
				seen[j.ID], last = true, j.Seq
			}
			if cursor = next; cursor == "" {
				break
			}
		}
		for _, id := range base {
			if !seen[id] {
				t.Fatalf("job %s, queued before the list, was not listed", id)
			}
		}
	}
}

// A job that ends moves to its owner's list of ended jobs, one queued again after its end
// moves back, and one that expires leaves whichever it is in: lists by status find each in
// its place, once, and look at nothing else.
func TestListFollowsEndsRetriesAndExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	s, err := memq.Open(memq.NewRecords(), memq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ids := insertJobs(t, s, "ep", "alice", 3, t0) // 0 completes, 1 is cancelled then retried, 2 stays queued
	if got, err := s.Take(ctx, "ep", "w", 1, t0); err != nil || len(got) != 1 {
		t.Fatalf("Take = %v, %v", got, err)
	}
	change := func(id string, from core.StatusSet, to core.JobStatus, expires time.Time) {
		t.Helper()
		if _, err := s.Update(ctx, id, from, func(j *core.Job) error {
			j.Status, j.ExpiresAt = to, expires
			return nil
		}, false); err != nil {
			t.Fatal(err)
		}
	}
	change(ids[0], core.Statuses(core.InProgress), core.Completed, t0.Add(time.Hour))
	change(ids[1], core.Statuses(core.InQueue), core.Cancelled, t0.Add(2*time.Hour))
	change(ids[1], core.Statuses(core.Cancelled), core.InQueue, t0.Add(24*time.Hour))
	list := func(status core.StatusSet) ([]string, int64) {
		t.Helper()
		before := s.ListVisits()
		jobs, _, err := s.List(ctx, core.JobFilter{Endpoint: "ep", Status: status})
		if err != nil {
			t.Fatal(err)
		}
		got := []string{}
		for _, j := range jobs {
			got = append(got, j.ID)
		}
		return got, s.ListVisits() - before
	}
	for _, tc := range []struct {
		status core.StatusSet
		want   []string
	}{
		{core.Statuses(core.InQueue), []string{ids[2], ids[1]}},
		{core.Statuses(core.Completed, core.Cancelled), []string{ids[0]}},
		{0, []string{ids[2], ids[1], ids[0]}},
	} {
		if got, visits := list(tc.status); fmt.Sprint(got) != fmt.Sprint(tc.want) || visits != int64(len(tc.want)) {
			t.Errorf("List(%v) = %v after %d visits; want %v, one visit each", tc.status, got, visits, tc.want)
		}
	}
	if gone, err := s.Expire(ctx, t0.Add(time.Hour)); err != nil || len(gone) != 1 || gone[0].ID != ids[0] {
		t.Fatalf("Expire = %v, %v; want job 0", gone, err)
	}
	if got, visits := list(core.Statuses(core.Completed)); len(got) != 0 || visits != 0 {
		t.Errorf("List(COMPLETED) after the expiry = %v after %d visits; want none, no visit", got, visits)
	}
}

// A purge of an endpoint's queue looks at that endpoint's live jobs (its user's, on a shared
// endpoint), not at every job of the store.
func TestPurgeCostsTheEndpointsQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	s, err := memq.Open(memq.NewRecords(), memq.Options{HotBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	insertJobs(t, s, "quiet", "bob", 3, t0)
	insertJobs(t, s, "model", "yolanda", 2, t0)
	insertJobs(t, s, "busy", "alice", 3000, t0)
	insertJobs(t, s, "model", "xavier", 3000, t0)
	cancel := func(j *core.Job) { j.Status = core.Cancelled }
	for _, tc := range []struct {
		endpoint, owner string
		want            int
	}{{"quiet", "", 3}, {"model", "yolanda", 2}} {
		before := s.ListVisits()
		if n, err := s.Purge(ctx, tc.endpoint, tc.owner, cancel, false); err != nil || n != tc.want {
			t.Errorf("Purge(%s, %q) = %d, %v; want %d", tc.endpoint, tc.owner, n, err, tc.want)
		}
		if v := s.ListVisits() - before; v != int64(tc.want) {
			t.Errorf("Purge(%s, %q) looked at %d jobs; want %d", tc.endpoint, tc.owner, v, tc.want)
		}
	}
	if st, _ := s.Stats(ctx, "model"); st.Queued != 3000 {
		t.Errorf("model's queue after yolanda's purge = %d; want xavier's 3000", st.Queued)
	}
}
