package postgres_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
)

// BenchmarkListBesideABacklog lists a page of 50 jobs while the store holds a backlog:
// GANTRY_BENCH_BACKLOG queued jobs (default 200000) on a busy endpoint, and as many of one
// user on a shared (model) endpoint. "other-endpoint" lists a quiet endpoint, "other-user"
// another user's jobs on the shared endpoint, "backlog" the busy endpoint's newest page. Each
// runs with the list indexes (0016), then without them ("no-index/…"), as before 0016.
func BenchmarkListBesideABacklog(b *testing.B) {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("GANTRY_BENCH_BACKLOG")); err == nil && v > 0 {
		n = v
	}
	s := openJobs(b, pgtest.URL(b))
	ctx := context.Background()
	backlog(b, s, "quiet", "bob", 59, false)
	backlog(b, s, "model", "yolanda", 59, false)
	backlog(b, s, "busy", "alice", n, false)
	backlog(b, s, "model", "xavier", n, false)
	if _, err := s.DB().Pool.Exec(ctx, `ANALYZE gantry_jobs; ANALYZE gantry_jobs_ended`); err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		f    core.JobFilter
	}{
		{"other-endpoint", core.JobFilter{Endpoint: "quiet", Limit: 50}},
		{"other-user", core.JobFilter{Endpoint: "model", Owner: "yolanda", Limit: 50}},
		{"backlog", core.JobFilter{Endpoint: "busy", Limit: 50}},
	}
	run := func(prefix string) {
		for _, bc := range cases {
			b.Run(prefix+bc.name, func(b *testing.B) {
				for b.Loop() {
					if jobs, _, err := s.List(ctx, bc.f); err != nil || len(jobs) != 50 {
						b.Fatalf("List = %d jobs, %v; want 50", len(jobs), err)
					}
				}
			})
		}
	}
	run("")
	if _, err := s.DB().Pool.Exec(ctx, `DROP INDEX gantry_jobs_list, gantry_jobs_owner_list, gantry_jobs_ended_owner_list`); err != nil {
		b.Fatal(err)
	}
	run("no-index/")
}
