package memq_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/memq"
)

// BenchmarkListBesideABacklog lists a page of 50 jobs while the store holds a backlog:
// GANTRY_BENCH_BACKLOG queued jobs (default 200000) on a busy endpoint, and as many of one
// user on a shared (model) endpoint. "other-endpoint" lists a quiet endpoint, "other-user"
// another user's jobs on the shared endpoint, "backlog" the busy endpoint's newest page.
func BenchmarkListBesideABacklog(b *testing.B) {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("GANTRY_BENCH_BACKLOG")); err == nil && v > 0 {
		n = v
	}
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	s, err := memq.Open(memq.NewRecords(), memq.Options{})
	if err != nil {
		b.Fatal(err)
	}
	insertJobs(b, s, "quiet", "bob", 60, t0)
	insertJobs(b, s, "model", "yolanda", 60, t0)
	insertJobs(b, s, "busy", "alice", n, t0)
	insertJobs(b, s, "model", "xavier", n, t0)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		f    core.JobFilter
	}{
		{"other-endpoint", core.JobFilter{Endpoint: "quiet", Limit: 50}},
		{"other-user", core.JobFilter{Endpoint: "model", Owner: "yolanda", Limit: 50}},
		{"backlog", core.JobFilter{Endpoint: "busy", Limit: 50}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if jobs, _, err := s.List(ctx, bc.f); err != nil || len(jobs) != 50 {
					b.Fatalf("List = %d jobs, %v; want 50", len(jobs), err)
				}
			}
		})
	}
}

// insertJobs queues n jobs of owner on the endpoint, queued at t0 on, and returns their ids,
// oldest first.
func insertJobs(tb testing.TB, s *memq.Store, endpoint, owner string, n int, t0 time.Time) []string {
	tb.Helper()
	ids := make([]string, n)
	for i := range n {
		j := core.Job{ID: core.NewJobKey(false).String(), Endpoint: endpoint, Owner: owner, Status: core.InQueue,
			QueuedAt: t0.Add(time.Duration(i) * time.Millisecond), ExpiresAt: t0.Add(24 * time.Hour)}
		if _, err := s.Insert(context.Background(), j, []byte(`{}`), false); err != nil {
			tb.Fatal(err)
		}
		ids[i] = j.ID
	}
	return ids
}
