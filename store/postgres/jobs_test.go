package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/internal/startstop"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/store/postgres"
)

// openJobs opens a job store on a fresh database, closed when t ends.
func openJobs(t testing.TB, url string) *postgres.Jobs {
	t.Helper()
	return openJobsWith(t, url, postgres.JobOptions{})
}

func openJobsWith(t testing.TB, url string, o postgres.JobOptions) *postgres.Jobs {
	t.Helper()
	ctx := context.Background()
	db, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	s := postgres.NewJobs(db, o)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// job returns a queued job of the endpoint, queued at at, living a day.
func job(endpoint string, at time.Time) core.Job {
	return core.Job{ID: core.NewJobKey(false).String(), Endpoint: endpoint, Owner: "alice", Status: core.InQueue,
		CreatedAt: at, QueuedAt: at, Retention: 30 * time.Minute, ExpiresAt: at.Add(24 * time.Hour)}
}

// waitFor fails t unless done yields nil within a generous limit.
func waitFor(t *testing.T, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s = %v; want nil", what, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not return within 20s", what)
	}
}

func async(fn func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	return done
}

// Two replicas on one database: each hears what the other does, through NOTIFY, and their
// takers never share a job.
func TestJobsAcrossReplicas(t *testing.T) {
	url := pgtest.URL(t)
	// A poll slower than the test: only notifies can wake these waiters in time.
	slow := postgres.JobOptions{PollEvery: time.Hour}
	a, b := openJobsWith(t, url, slow), openJobsWith(t, url, slow)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Now()

	heard := make(chan string, 16)
	if err := b.ListenAvailable(ctx, func(ep string) {
		select {
		case heard <- ep:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	avail := async(func() error { return b.WaitAvailable(ctx, "ep") })
	j, err := a.Insert(ctx, job("ep", now), []byte(`{}`), true)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "WaitAvailable on replica b after an insert on a", avail)
	select {
	case ep := <-heard:
		if ep != "ep" {
			t.Errorf("b's ListenAvailable heard %q; want ep", ep)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("b's ListenAvailable heard nothing of a's insert")
	}

	taken, err := b.Take(ctx, "ep", "w", 1, now)
	if err != nil || len(taken) != 1 {
		t.Fatalf("Take on b = %v, %v; want the job", taken, err)
	}
	ended := async(func() error { return b.WaitEnded(ctx, j.ID) })
	chunks := async(func() error { return a.WaitChunks(ctx, j.ID) })
	if _, err := b.AppendChunks(ctx, j.ID, "w", []core.StreamChunk{{Output: []byte(`"x"`)}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "WaitChunks on a after an append on b", chunks)
	if _, err := a.Update(ctx, j.ID, core.Statuses(core.InProgress), func(j *core.Job) error {
		j.Status, j.EndedAt, j.ExpiresAt = core.Completed, now, now.Add(j.Retention)
		return nil
	}, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "WaitEnded on b after the end on a", ended)

	// Takers on both replicas share one queue and never one job.
	const n = 200
	for i := range n {
		if _, err := a.Insert(ctx, job("burst", now), nil, i%2 == 0); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for i, s := range []*postgres.Jobs{a, b, a, b} {
		wg.Go(func() {
			for {
				got, err := s.Take(ctx, "burst", fmt.Sprintf("w%d", i), 3, now)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, tj := range got {
					if seen[tj.Job.ID] {
						t.Errorf("job %s taken twice", tj.Job.ID)
					}
					seen[tj.Job.ID] = true
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

// A job queued without a notify (one lost) still wakes a parked taker, by the slow poll.
func TestJobsPollCoversALostNotify(t *testing.T) {
	url := pgtest.URL(t)
	s := openJobsWith(t, url, postgres.JobOptions{PollEvery: 50 * time.Millisecond})
	ctx := context.Background()
	avail := async(func() error { return s.WaitAvailable(ctx, "ep") })
	// Another replica's insert whose notify never came: the row alone.
	other := openJobsWith(t, url, postgres.JobOptions{})
	j, err := other.Insert(ctx, job("elsewhere", time.Now()), nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.DB().Pool.Exec(ctx, `UPDATE gantry_jobs SET endpoint = 'ep' WHERE id = $1`, j.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "WaitAvailable after a job queued without a notify", avail)
}

// The store starts and stops as every long-running service does: a second Start is refused,
// and a store stopped and started again still wakes its waiters.
func TestJobsStartStop(t *testing.T) {
	s := openJobs(t, pgtest.URL(t))
	ctx := context.Background()
	if err := s.Start(ctx); !errors.Is(err, startstop.ErrStarted) {
		t.Fatalf("second Start = %v; want startstop.ErrStarted", err)
	}
	s.Stop()
	s.Stop() // a second Stop does nothing
	if err := s.Start(ctx); err != nil {
		t.Fatalf("Start after Stop = %v; want nil", err)
	}
	avail := async(func() error { return s.WaitAvailable(ctx, "ep") })
	if _, err := s.Insert(ctx, job("ep", time.Now()), nil, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "WaitAvailable on a restarted store", avail)
}

// Ended jobs leave the live table, and retention drops their partitions whole.
func TestJobsRetentionDropsPartitions(t *testing.T) {
	url := pgtest.URL(t)
	s := openJobsWith(t, url, postgres.JobOptions{PartitionWidth: time.Minute})
	ctx := context.Background()
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 6 {
		j := job("ep", t0)
		j.Retention = time.Duration(i) * time.Minute // one partition each
		if _, err := s.Insert(ctx, j, nil, false); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Take(ctx, "ep", "w", 1, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ctx, j.ID, core.Statuses(core.InProgress), func(j *core.Job) error {
			j.Status, j.EndedAt, j.ExpiresAt = core.Completed, t0, t0.Add(j.Retention)
			return nil
		}, false); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	count := func(q string) int {
		t.Helper()
		var n int
		if err := s.DB().Pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The partitions of these jobs' spans: the store makes others ahead of need, for the
	// jobs that end at the time of Start or of Expire.
	var names []string
	for i := range 6 {
		names = append(names, partName(t0.Add(time.Duration(i)*time.Minute), time.Minute))
	}
	parts := func() int { return len(partitionsOf(t, s, names)) }
	if n := count(`SELECT count(*) FROM gantry_jobs`); n != 0 {
		t.Errorf("live table holds %d rows after every job ended; want 0", n)
	}
	if n := parts(); n != 6 {
		t.Errorf("%d partitions of ended jobs; want 6 (a minute each)", n)
	}
	gone, err := s.Expire(ctx, t0.Add(3*time.Minute))
	if err != nil || len(gone) != 4 {
		t.Fatalf("Expire(t0+3m) = %d jobs, %v; want 4", len(gone), err)
	}
	if n := parts(); n != 3 {
		t.Errorf("%d partitions after Expire(t0+3m); want 3 (those past it dropped whole)", n)
	}
	if _, err := s.Get(ctx, ids[3]); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Get of a job expired at t0+3m = %v; want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, ids[4]); err != nil {
		t.Errorf("Get of a job expiring at t0+4m = %v; want it", err)
	}
	if again, err := s.Expire(ctx, t0.Add(3*time.Minute)); err != nil || len(again) != 0 {
		t.Errorf("second Expire(t0+3m) = %v, %v; want none (each job reported once)", again, err)
	}
}

// A queued job wakes one parked taker, not every one: a herd of takers, all but one finding
// nothing, would cost PostgreSQL a query each per job.
func TestJobsInsertWakesOneParkedTaker(t *testing.T) {
	url := pgtest.URL(t)
	s := openJobsWith(t, url, postgres.JobOptions{PollEvery: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	woke := make(chan int, 3)
	for i := range 3 {
		go func() {
			if s.WaitAvailable(ctx, "ep") == nil {
				woke <- i
			}
		}()
	}
	testkit.Eventually(t, "three takers parked", func() bool { return s.Parked("ep") == 3 })
	if len(woke) != 0 {
		t.Fatalf("%d takers returned with nothing queued", len(woke))
	}
	if _, err := s.Insert(ctx, job("ep", time.Now()), nil, true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woke:
	case <-time.After(20 * time.Second):
		t.Fatal("no parked taker woke on an insert")
	}
	time.Sleep(200 * time.Millisecond) // a wrong wake-up would come at once
	if n, parked := len(woke), s.Parked("ep"); n != 0 || parked != 2 {
		t.Errorf("after one insert %d more takers woke and %d stay parked; want 0 and 2", n, parked)
	}
}

// A replica's post to a job it handed out is refused when another replica changed the job
// meanwhile: what the first remembers of the job does not outvote the database.
func TestJobsStaleRecordLosesToTheDatabase(t *testing.T) {
	url := pgtest.URL(t)
	a, b := openJobs(t, url), openJobs(t, url)
	ctx := context.Background()
	now := time.Now()
	j, err := a.Insert(ctx, job("ep", now), nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := a.Take(ctx, "ep", "w", 1, now); err != nil || len(got) != 1 {
		t.Fatalf("Take = %v, %v", got, err)
	}
	if _, err := b.Update(ctx, j.ID, core.From(core.EvRequeue), func(j *core.Job) error {
		j.Status, j.WorkerID = core.InQueue, ""
		return nil
	}, true); err != nil {
		t.Fatal(err)
	}
	_, err = a.Update(ctx, j.ID, core.From(core.EvDone), func(j *core.Job) error {
		j.Status, j.Output = core.Completed, []byte(`"late"`)
		return nil
	}, true)
	var se *core.StateError
	if !errors.As(err, &se) || se.Status != core.InQueue {
		t.Errorf("a's done after b requeued the job = %v; want a StateError with status IN_QUEUE", err)
	}
	if got, err := b.Get(ctx, j.ID); err != nil || got.Status != core.InQueue || got.Output != nil {
		t.Errorf("job after the refused done = %+v, %v; want IN_QUEUE without output", got, err)
	}
}

// A take's transaction commits without waiting for the disk: the statement turns
// synchronous_commit off for its own transaction (a server default of on notwithstanding).
func TestJobsTakeDoesNotWaitForTheDisk(t *testing.T) {
	ctx := context.Background()
	s := openJobs(t, pgtest.URL(t))
	now := time.Now()
	if _, err := s.Insert(ctx, job("ep", now), nil, true); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{postgres.TakeSQL, postgres.TakeBeatSQL} {
		err := pgx.BeginFunc(ctx, s.DB().Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = on`); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, sql, "ep", "w", now, 1)
			if err != nil {
				return err
			}
			n := 0
			for rows.Next() {
				n++
			}
			if rows.Close(); rows.Err() != nil || n != 1 {
				return fmt.Errorf("took %d jobs (%v); want 1", n, rows.Err())
			}
			var sc string
			if err := tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&sc); err != nil {
				return err
			}
			if sc != "off" {
				return fmt.Errorf("after a take synchronous_commit = %q; want off", sc)
			}
			return errors.New("roll back") // the job stays queued for the next statement
		})
		if err == nil || err.Error() != "roll back" {
			t.Fatal(err)
		}
	}
}

// Concurrent durable inserts are committed in groups: each gets its own seq, and a request
// whose id exists fails alone.
func TestJobsConcurrentInsertsGroup(t *testing.T) {
	ctx := context.Background()
	s := openJobs(t, pgtest.URL(t))
	now := time.Now()
	dup := job("ep", now)
	if _, err := s.Insert(ctx, dup, []byte("first"), true); err != nil {
		t.Fatal(err)
	}
	const n = 200
	seqs := make([]uint64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			j := job("ep", now)
			if i == n/2 {
				j = dup
			}
			got, err := s.Insert(ctx, j, []byte(fmt.Sprint(i)), true)
			seqs[i], errs[i] = got.Seq, err
		})
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for i, err := range errs {
		if i == n/2 {
			if err == nil || !strings.Contains(err.Error(), "exists") {
				t.Errorf("inserting an existing job: %v; want it refused", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
		if seqs[i] == 0 || seen[seqs[i]] {
			t.Fatalf("insert %d got seq %d, zero or taken", i, seqs[i])
		}
		seen[seqs[i]] = true
	}
	if in, err := s.Input(ctx, dup.ID); err != nil || string(in) != "first" {
		t.Fatalf("the existing job's input = %q, %v; want it kept", in, err)
	}
	var queued int
	if err := s.DB().Pool.QueryRow(ctx, `SELECT count(*) FROM gantry_jobs WHERE status = 'IN_QUEUE'`).Scan(&queued); err != nil || queued != n {
		t.Fatalf("%d queued (%v); want %d", queued, err, n)
	}
}

// Concurrent durable ends commit in groups; a group whose statements fail (their partition
// was dropped by another replica) runs each write again alone, and each then succeeds.
func TestJobsGroupedWritesSurviveAFailedGroup(t *testing.T) {
	ctx := context.Background()
	s := openJobs(t, pgtest.URL(t))
	now := time.Now()
	const n = 40
	for range n {
		if _, err := s.Insert(ctx, job("ep", now), nil, true); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Take(ctx, "ep", "w", n, now)
	if err != nil || len(got) != n {
		t.Fatalf("Take = %d jobs, %v; want %d", len(got), err, n)
	}
	end := func(id string) error {
		_, err := s.Update(ctx, id, core.Statuses(core.InProgress), func(j *core.Job) error {
			j.Status, j.EndedAt, j.ExpiresAt = core.Completed, now, now.Add(time.Hour)
			return nil
		}, true)
		return err
	}
	if err := end(got[0].Job.ID); err != nil { // makes the partition
		t.Fatal(err)
	}
	var part string
	if err := s.DB().Pool.QueryRow(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'gantry_jobs_ended'::regclass`).Scan(&part); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().Pool.Exec(ctx, "DROP TABLE "+part); err != nil { // as another replica would
		t.Fatal(err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Go(func() { errs[i] = end(got[i].Job.ID) })
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if errs[i] != nil {
			t.Fatalf("ending job %d: %v", i, errs[i])
		}
		j, err := s.Get(ctx, got[i].Job.ID)
		if err != nil || j.Status != core.Completed {
			t.Fatalf("job %d: %s, %v; want %s", i, j.Status, err, core.Completed)
		}
	}
}

// A group of durable writes with a failing statement rolls back and runs each write alone:
// the others are stored once each, and only the failing one reports an error.
func TestJobsWriteGroupRunsAloneAfterAFailure(t *testing.T) {
	ctx := context.Background()
	s := openJobs(t, pgtest.URL(t))
	if _, err := s.DB().Pool.Exec(ctx, `CREATE TABLE grouped (n int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	ok, errs := s.WriteGroup(ctx, []string{
		`INSERT INTO grouped VALUES (1) RETURNING n`,
		`SELECT 1 / 0`,
		`INSERT INTO grouped VALUES (2) ON CONFLICT DO NOTHING RETURNING n`,
		`INSERT INTO grouped VALUES (2) ON CONFLICT DO NOTHING RETURNING n`,
	})
	if errs[0] != nil || errs[2] != nil || errs[3] != nil || errs[1] == nil {
		t.Fatalf("errors %v; want only the second write's", errs)
	}
	if !ok[0] || !ok[2] || ok[3] {
		t.Fatalf("rows returned %v; want the first and third writes' only", ok)
	}
	var n int
	if err := s.DB().Pool.QueryRow(ctx, `SELECT count(*) FROM grouped`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows (%v); want 2", n, err)
	}
}
