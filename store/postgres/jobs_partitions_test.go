package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
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
