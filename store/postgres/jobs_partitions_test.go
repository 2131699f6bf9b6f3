package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/store/postgres"
)

// endRetentions are the retentions core gives a job at its end.
var endRetentions = []time.Duration{core.RunSyncRetention, core.RunSyncLongRetention, core.RunRetention}

// partName is the name of the partition, spans of width, that a job expiring at t goes to.
func partName(t time.Time, width time.Duration) string {
	return fmt.Sprintf("gantry_jobs_ended_p%d", t.UnixMicro()/width.Microseconds())
}

// partitionsOf returns which of names are partitions of gantry_jobs_ended.
func partitionsOf(t *testing.T, s *postgres.Jobs, names []string) map[string]bool {
	t.Helper()
	rows, err := s.DB().Pool.Query(context.Background(), `SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'gantry_jobs_ended'::regclass AND c.relname = ANY($1)`, names)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		got[n] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// wantPartitions fails t unless the partitions that jobs ending at each of ends go to exist,
// for every retention core gives.
func wantPartitions(t *testing.T, s *postgres.Jobs, width time.Duration, what string, ends ...time.Time) {
	t.Helper()
	var names []string
	for _, end := range ends {
		for _, r := range endRetentions {
			names = append(names, partName(end.Add(r), width))
		}
	}
	got := partitionsOf(t, s, names)
	for _, n := range names {
		if !got[n] {
			t.Errorf("%s: partition %s missing; want it made before a job ends into it", what, n)
		}
	}
}

// A store that starts has made the partitions that the jobs ending now, and for the next
// span, go to: the first job to end runs no DDL.
func TestJobsPartitionReadyBeforeFirstEnd(t *testing.T) {
	url := pgtest.URL(t)
	// Start's clock is between these: a job ending at after (this span) or at before plus a
	// span (the next) goes to a partition it made, even if a span began meanwhile.
	before := time.Now()
	s := openJobs(t, url)
	after := time.Now()
	wantPartitions(t, s, time.Hour, "after Start", after, before.Add(time.Hour))
}

// As the clock (Expire's now) moves into later spans, the store makes their partitions
// before any job ends into them.
func TestJobsPartitionsAheadFollowTheClock(t *testing.T) {
	const width = time.Minute
	s := openJobsWith(t, pgtest.URL(t), postgres.JobOptions{PartitionWidth: width})
	ctx := context.Background()
	t1 := time.Date(2031, time.January, 1, 0, 0, 0, 0, time.UTC)
	for _, at := range []time.Time{t1, t1.Add(10 * time.Minute), t1.Add(3 * time.Hour)} {
		if _, err := s.Expire(ctx, at); err != nil {
			t.Fatal(err)
		}
		wantPartitions(t, s, width, fmt.Sprintf("after Expire(%v)", at), at, at.Add(width))
	}
}

// Ending a job does not wait for the transactions reading gantry_jobs_ended (status reads,
// lists), nor do they wait behind it: neither the partition made ahead nor one the end must
// make itself (an expiry nothing foresaw) takes a lock that conflicts with a read.
func TestJobsEndDoesNotWaitForReaders(t *testing.T) {
	url := pgtest.URL(t)
	s := openJobs(t, url)
	ctx := context.Background()
	reader, err := s.DB().Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reader.Rollback(ctx) }()
	var n int
	if err := reader.QueryRow(ctx, `SELECT count(*) FROM gantry_jobs_ended`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, retention := range []time.Duration{core.RunRetention, 7 * time.Hour} {
		j := job("ep", now)
		j.Retention = retention
		if _, err := s.Insert(ctx, j, nil, true); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Take(ctx, "ep", "w", 1, now); err != nil || len(got) != 1 {
			t.Fatalf("Take = %v, %v", got, err)
		}
		end, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := s.Update(end, j.ID, core.Statuses(core.InProgress), func(j *core.Job) error {
			j.Status, j.EndedAt, j.ExpiresAt = core.Completed, now, now.Add(j.Retention)
			return nil
		}, true)
		cancel()
		if err != nil {
			t.Fatalf("ending a job kept %v while a reader holds gantry_jobs_ended = %v; want it ended at once", retention, err)
		}
		// A new read is not held behind anything either.
		read, cancel := context.WithTimeout(ctx, 3*time.Second)
		got, err := s.Get(read, j.ID)
		cancel()
		if err != nil || got.Status != core.Completed {
			t.Fatalf("Get of the ended job = %v, %v; want it COMPLETED", got.Status, err)
		}
	}
}

// endJob ends the running job (inserted and taken first) at at, expiring its retention later.
func endJob(ctx context.Context, t *testing.T, s *postgres.Jobs, j core.Job, at time.Time) error {
	t.Helper()
	if _, err := s.Insert(ctx, j, nil, true); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Take(ctx, j.Endpoint, "w", 1, at); err != nil || len(got) != 1 {
		t.Fatalf("Take = %v, %v", got, err)
	}
	_, err := s.Update(ctx, j.ID, core.Statuses(core.InProgress), func(j *core.Job) error {
		j.Status, j.EndedAt, j.ExpiresAt = core.Completed, at, at.Add(j.Retention)
		return nil
	}, true)
	return err
}

// openReader begins a transaction that has read gantry_jobs_ended and holds its lock, as a
// status read or a list in flight does, until the test ends it.
func openReader(t *testing.T, s *postgres.Jobs) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	reader, err := s.DB().Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reader.Rollback(ctx) })
	var n int
	if err := reader.QueryRow(ctx, `SELECT count(*) FROM gantry_jobs_ended`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return reader
}

// tablesLeft returns which of names are still tables, attached or not, and which of those
// are partitions pending a detach.
func tablesLeft(t *testing.T, s *postgres.Jobs, names []string) (left, pending []string) {
	t.Helper()
	rows, err := s.DB().Pool.Query(context.Background(), `SELECT c.relname, coalesce(i.inhdetachpending, false)
		FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
		WHERE c.relname = ANY($1) AND c.relkind = 'r' ORDER BY 1`, names)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		var p bool
		if err := rows.Scan(&n, &p); err != nil {
			t.Fatal(err)
		}
		left = append(left, n)
		if p {
			pending = append(pending, n)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return left, pending
}

// The Expire that drops a past partition does not hold up the jobs that end nor the reads
// that begin meanwhile, though a transaction that read gantry_jobs_ended stays open (DROP
// TABLE of a partition would wait for it with an AccessExclusiveLock on the partitioned
// table, and queue every later read behind it), nor does it wait for that transaction
// longer than a bounded time; once that transaction ends, a later Expire finishes the drop.
func TestJobsDropPastDoesNotStallReadersOrEnds(t *testing.T) {
	const width = time.Minute
	s := openJobsWith(t, pgtest.URL(t), postgres.JobOptions{PartitionWidth: width})
	ctx := context.Background()
	t0 := time.Now()
	old := job("ep", t0)
	old.Retention = core.RunSyncRetention
	if err := endJob(ctx, t, s, old, t0); err != nil {
		t.Fatal(err)
	}
	past := partName(t0.Add(old.Retention), width)
	if got := partitionsOf(t, s, []string{past}); !got[past] {
		t.Fatalf("partition %s of the ended job missing", past)
	}
	later := job("ep", t0)
	later.Retention = core.RunRetention
	if _, err := s.Insert(ctx, later, nil, true); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Take(ctx, "ep", "w", 1, t0); err != nil || len(got) != 1 {
		t.Fatalf("Take = %v, %v", got, err)
	}

	reader := openReader(t, s)
	type expired struct {
		jobs []core.ExpiredJob
		err  error
	}
	done := make(chan expired, 1)
	at := t0.Add(3 * time.Minute) // past the old job's span
	go func() {
		jobs, err := s.Expire(ctx, at)
		done <- expired{jobs, err}
	}()
	// The drop has begun: it waits for the reader (or, bounded, gave up waiting).
	testkit.Eventually(t, "the drop under way", func() bool {
		if len(done) > 0 {
			return true
		}
		var n int
		if err := s.DB().Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'
				AND (query ILIKE '%DETACH PARTITION%' OR query ILIKE 'DROP TABLE%')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	// Within 3 s, whether or not the call heeds its context (a durable write's group goes on
	// without it).
	soon := func(what string, fn func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		select {
		case err := <-async(func() error { return fn(ctx) }):
			if err != nil {
				t.Fatalf("%s while a past partition is dropped (a reader open) = %v; want it done at once", what, err)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("%s while a past partition is dropped (a reader open) still waits after 3s; want it done at once", what)
		}
	}
	soon("ending a job", func(ctx context.Context) error {
		_, err := s.Update(ctx, later.ID, core.Statuses(core.InProgress), func(j *core.Job) error {
			j.Status, j.EndedAt, j.ExpiresAt = core.Completed, t0, t0.Add(j.Retention)
			return nil
		}, true)
		return err
	})
	soon("reading the job ended", func(ctx context.Context) error {
		got, err := s.Get(ctx, later.ID)
		if err == nil && got.Status != core.Completed {
			err = fmt.Errorf("status %s, want COMPLETED", got.Status)
		}
		return err
	})

	// Nor does the tick wait for the reader: its wait is bounded.
	var first expired
	select {
	case first = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Expire did not return within 20s, a reader open")
	}
	if first.err != nil || len(first.jobs) != 1 || first.jobs[0].ID != old.ID {
		t.Fatalf("Expire(t0+3m) = %v, %v; want the old job", first.jobs, first.err)
	}
	if err := reader.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A later Expire (a later tick) finishes what the first could not.
	for i := 1; ; i++ {
		left, _ := tablesLeft(t, s, []string{past})
		if len(left) == 0 {
			break
		}
		if i > 40 {
			t.Fatalf("partition %s still there after %d more Expires; want it dropped", past, i)
		}
		if x, err := s.Expire(ctx, at.Add(time.Duration(i)*15*time.Second)); err != nil || len(x) != 0 {
			t.Fatalf("Expire = %v, %v; want nothing more", x, err)
		}
	}
	if got, err := s.Get(ctx, later.ID); err != nil || got.Status != core.Completed {
		t.Errorf("Get of the job ended meanwhile = %v, %v; want it COMPLETED", got.Status, err)
	}
}

// Replicas that drop the same past partitions at once both end well, and between them drop
// what a drop interrupted left: a partition pending its detach (a replica gone, or a lock not
// had, while it waited) and a table detached but not dropped. While a transaction that read
// gantry_jobs_ended is open the drops wait for it only a bounded time, and say to try again.
func TestJobsDropPastByReplicasAtOnce(t *testing.T) {
	const width = time.Minute
	url := pgtest.URL(t)
	a := openJobsWith(t, url, postgres.JobOptions{PartitionWidth: width})
	b := openJobsWith(t, url, postgres.JobOptions{PartitionWidth: width})
	ctx := context.Background()
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	var names []string // spans t0+1m … t0+5m
	for i := 1; i <= 5; i++ {
		j := job("ep", t0)
		j.Retention = time.Duration(i) * time.Minute
		if err := endJob(ctx, t, a, j, t0); err != nil {
			t.Fatal(err)
		}
		names = append(names, partName(t0.Add(j.Retention), width))
	}
	horizon := t0.Add(4 * time.Minute) // past the spans of t0+1m … t0+3m
	gone, kept := names[:3], names[3:]
	exec := func(c interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}, sql string) error {
		_, err := c.Exec(ctx, sql)
		return err
	}
	// Detached, not dropped: a replica stopped between the two.
	if err := exec(a.DB().Pool, `ALTER TABLE gantry_jobs_ended DETACH PARTITION `+gone[1]); err != nil {
		t.Fatal(err)
	}
	reader := openReader(t, a)
	// Pending: a concurrent detach that gave up waiting for the reader.
	c, err := a.DB().Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := exec(c, `SET lock_timeout = 200`); err != nil {
		t.Fatal(err)
	}
	err = exec(c, `ALTER TABLE gantry_jobs_ended DETACH PARTITION `+gone[0]+` CONCURRENTLY`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55P03" {
		t.Fatalf("detach with a reader open = %v; want a lock timeout", err)
	}
	_ = c.Conn().Close(ctx) // a connection with lock_timeout set goes
	c.Release()
	if _, pending := tablesLeft(t, a, gone); len(pending) != 1 || pending[0] != gone[0] {
		t.Fatalf("pending detach = %v; want %s", pending, gone[0])
	}

	both := func(ctx context.Context) []error {
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, s := range []*postgres.Jobs{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = s.DropPast(ctx, horizon)
			}()
		}
		wg.Wait()
		return errs
	}
	// With the reader open: back within a bounded wait, saying to try again; a read meanwhile
	// is not held up.
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	read := async(func() error { _, err := b.Get(short, "nope"); return err })
	for i, err := range both(short) {
		if err != nil && !postgres.DropLater(err) {
			t.Errorf("replica %d's drop with a reader open = %v; want nil or to try again later", i, err)
		}
	}
	if err := <-read; !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Get while the replicas drop = %v; want ErrNotFound at once", err)
	}
	cancel()
	if t.Failed() {
		t.FailNow()
	}
	if err := reader.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		errs := both(ctx)
		for r, err := range errs {
			if err != nil && !postgres.DropLater(err) {
				t.Fatalf("replica %d's drop = %v; want nil or to try again later", r, err)
			}
		}
		if errs[0] == nil && errs[1] == nil {
			break
		}
		if i == 20 {
			t.Fatalf("drops still say to try again after %d tries: %v", i, errs)
		}
	}
	if left, _ := tablesLeft(t, a, gone); len(left) != 0 {
		t.Errorf("tables left of the past spans: %v; want none", left)
	}
	if got := partitionsOf(t, a, kept); len(got) != len(kept) {
		t.Errorf("partitions of spans not past: %v; want %v", got, kept)
	}
}
