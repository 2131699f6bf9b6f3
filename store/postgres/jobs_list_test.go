package postgres_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/store/postgres"
)

// backlog stores n+1 jobs of owner on the endpoint, live (queued) or ended (COMPLETED): one
// through the store, and n copies of it made by SQL (each with a new id and seq), which is
// quicker than n inserts. It returns the first job.
func backlog(t testing.TB, s *postgres.Jobs, endpoint, owner string, n int, ended bool) core.Job {
	t.Helper()
	ctx := context.Background()
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	j := job(endpoint, t0)
	j.Owner = owner
	j, err := s.Insert(ctx, j, []byte(`{}`), false)
	if err != nil {
		t.Fatal(err)
	}
	table := "gantry_jobs"
	if ended {
		table = "gantry_jobs_ended"
		if _, err := s.Update(ctx, j.ID, core.Statuses(core.InQueue), func(j *core.Job) error {
			j.Status, j.EndedAt = core.Cancelled, t0
			return nil
		}, false); err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 {
		return j
	}
	const cols = `endpoint, owner, status, qseq, low, worker_id, timeout_ms, queued_at, started_at, deadline,
		expires_at, streamed, webhook_pending, output, body, input, rev`
	if _, err := s.DB().Pool.Exec(ctx, `INSERT INTO `+table+` (id, seq, `+cols+`)
		SELECT t.id || '-' || g, nextval('gantry_job_seq'), `+cols+` FROM `+table+` t, generate_series(1, $2) g
		WHERE t.id = $1`, j.ID, n); err != nil {
		t.Fatal(err)
	}
	return j
}

// A page of a job list reads its own rows through the list indexes, never the backlog of
// another endpoint or, on an endpoint shared by its users (a ready-made model's), another
// user's jobs: EXPLAIN ANALYZE of each list shows index scans only, no node returning more
// rows than the page (and the one more that tells whether another follows), and no rows
// removed by a filter. Before migration 0016 the live table had no list index, and each list
// was a sequential scan of every live job.
func TestJobListReadsItsPageByIndex(t *testing.T) {
	url := pgtest.URL(t)
	s := openJobs(t, url)
	ctx := context.Background()
	const n = 20000
	backlog(t, s, "quiet", "bob", 0, false)
	backlog(t, s, "quiet", "bob", 0, true)
	backlog(t, s, "model", "yolanda", 3, false)
	backlog(t, s, "model", "yolanda", 3, true)
	backlog(t, s, "busy", "alice", n, false)
	backlog(t, s, "busy", "alice", n, true)
	backlog(t, s, "model", "xavier", n, false)
	backlog(t, s, "model", "xavier", n, true)
	if _, err := s.DB().Pool.Exec(ctx, `ANALYZE gantry_jobs; ANALYZE gantry_jobs_ended`); err != nil {
		t.Fatal(err)
	}
	cancelled := core.Statuses(core.Cancelled)
	for _, tc := range []struct {
		name string
		f    core.JobFilter
	}{
		{"another endpoint", core.JobFilter{Endpoint: "quiet", Limit: 50}},
		{"another user on a shared endpoint", core.JobFilter{Endpoint: "model", Owner: "yolanda", Limit: 50}},
		{"the backlog's newest page", core.JobFilter{Endpoint: "busy", Limit: 50}},
		{"the backlog from a cursor", core.JobFilter{Endpoint: "busy", Limit: 50, Cursor: "30000"}},
		{"the backlog's user from a cursor", core.JobFilter{Endpoint: "model", Owner: "xavier", Limit: 50, Cursor: "70000"}},
		{"ended jobs beside a queue", core.JobFilter{Endpoint: "busy", Status: cancelled, Limit: 50}},
		{"queued jobs beside ended ones", core.JobFilter{Endpoint: "model", Owner: "xavier", Status: core.Statuses(core.InQueue), Limit: 50, Cursor: "70000"}},
	} {
		sql, args, err := postgres.ListQuery(tc.f)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := s.DB().Pool.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+sql, args...)
		if err != nil {
			t.Fatalf("%s: EXPLAIN = %v", tc.name, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: EXPLAIN = %v", tc.name, err)
		}
		// The partitions made ahead of need are empty: a scan of one that reads no row costs
		// nothing, and the planner rightly picks a sequential one there; such nodes are left
		// out of the checks.
		text := emptyPartitionScan.ReplaceAllString(strings.Join(plan, "\n"), "")
		scans := strings.ReplaceAll(text, "Seq Scan on gantry_jobs_horizon", "") // the one-row horizon
		if strings.Contains(scans, "Seq Scan") || !strings.Contains(text, "Index Scan") {
			t.Errorf("%s: the plan is not index scans alone:\n%s", tc.name, text)
		}
		for _, m := range regexp.MustCompile(`actual rows=(\d+)`).FindAllStringSubmatch(text, -1) {
			if r, _ := strconv.Atoi(m[1]); r > tc.f.Limit+1 {
				t.Errorf("%s: a node of the plan returned %d rows for a page of %d:\n%s", tc.name, r, tc.f.Limit, text)
				break
			}
		}
		if m := regexp.MustCompile(`Rows Removed by Filter: (\d+)`).FindStringSubmatch(text); m != nil {
			t.Errorf("%s: the plan filtered out %s rows it read:\n%s", tc.name, m[1], text)
		}
		if tc.f.Owner != "" && strings.Count(text, "Index Cond") != strings.Count(text, "owner = ") {
			t.Errorf("%s: an index scan does not seek the owner:\n%s", tc.name, text)
		}
	}
	// And the pages hold what they should.
	jobs, next, err := s.List(ctx, core.JobFilter{Endpoint: "model", Owner: "yolanda", Limit: 5})
	if err != nil || len(jobs) != 5 || next == "" {
		t.Fatalf("List(model, yolanda, 5) = %d jobs, %q, %v; want 5 and a cursor", len(jobs), next, err)
	}
	for _, j := range jobs {
		if j.Owner != "yolanda" {
			t.Errorf("List(model, yolanda) returned %s's job %s", j.Owner, j.ID)
		}
	}
	rest, next, err := s.List(ctx, core.JobFilter{Endpoint: "model", Owner: "yolanda", Limit: 5, Cursor: next})
	if err != nil || len(rest) != 3 || next != "" || rest[0].Seq >= jobs[4].Seq {
		t.Errorf("List(model, yolanda, 5) from the cursor = %d jobs, %q, %v; want the 3 older ones, no cursor", len(rest), next, err)
	}
}

// emptyPartitionScan matches a sequential scan of a partition of ended jobs that read no row.
var emptyPartitionScan = regexp.MustCompile(`(?m)^ *->  Seq Scan on gantry_jobs_ended_[pm]\d+ \S+ \(actual rows=0 loops=1\)\n(^ *Filter: .*\n?)?`)
