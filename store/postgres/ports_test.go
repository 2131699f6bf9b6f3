package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/store/postgres"
	"github.com/gantryhq/gantry/store/storetest"
)

// open opens a store on url and closes it when the test ends.
func open(t *testing.T, url string) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("Open = %v; want nil", err)
	}
	t.Cleanup(db.Close)
	return db
}

// opener runs a suite on a fresh database seen as S; reopen closes the pool and opens the
// same database again, as a restart would.
func opener[S any](as func(t *testing.T, db *postgres.DB) S) storetest.Opener[S] {
	return func(t *testing.T) (S, func() S) {
		url := pgtest.URL(t)
		db := open(t, url)
		return as(t, db), func() S {
			db.Close()
			db = open(t, url)
			return as(t, db)
		}
	}
}

// TestStores runs every port's suite on the shared backend, as server.OpenStores opens it: the
// keys through the cache each replica authenticates with, the worker tokens through the store
// that follows revocations, the jobs through the job engine.
func TestStores(t *testing.T) {
	t.Parallel()
	storetest.RunAll(t, storetest.Backend{
		Endpoints:  opener(func(_ *testing.T, db *postgres.DB) core.EndpointStore { return db }),
		Templates:  opener(func(_ *testing.T, db *postgres.DB) core.TemplateStore { return db }),
		Volumes:    opener(func(_ *testing.T, db *postgres.DB) core.VolumeStore { return db }),
		Usage:      opener(func(_ *testing.T, db *postgres.DB) core.UsageStore { return db }),
		History:    opener(func(_ *testing.T, db *postgres.DB) core.HistoryStore { return db }),
		Files:      opener(func(_ *testing.T, db *postgres.DB) core.FileStore { return db }),
		RateLimits: opener(func(_ *testing.T, db *postgres.DB) core.RateLimits { return db.RateLimits() }),
		Leases:     opener(func(_ *testing.T, db *postgres.DB) core.Leases { return db.Leases() }),
		Keys: func(t *testing.T) (core.KeyStore, func() core.KeyStore) {
			url := pgtest.URL(t)
			db, c := openKeyCache(t, url)
			return c, func() core.KeyStore {
				c.Stop()
				db.Close()
				_, c = openKeyCache(t, url)
				return c
			}
		},
		// The follower holds a connection of the pool: it stops before its pool closes.
		WorkerTokens: func(t *testing.T) (core.WorkerTokenStore, func() core.WorkerTokenStore) {
			url := pgtest.URL(t)
			db, s := openTokens(t, url)
			return s, func() core.WorkerTokenStore {
				s.Close()
				db.Close()
				db, s = openTokens(t, url)
				return s
			}
		},
		Jobs: func(t *testing.T) (core.JobStore, func() core.JobStore) { return openJobs(t, pgtest.URL(t)), nil },
	})
}

// TestKeyStoreUncached runs the KeyStore suite on the DB itself too: `gantry keys --store`
// changes keys through it, without a cache.
func TestKeyStoreUncached(t *testing.T) {
	t.Parallel()
	storetest.RunKeyStore(t, opener(func(_ *testing.T, db *postgres.DB) core.KeyStore { return db }))
}

// openTokens opens a store on url and its worker-token store, closed when the test ends.
func openTokens(t *testing.T, url string) (*postgres.DB, *postgres.WorkerTokenStore) {
	t.Helper()
	db := open(t, url)
	s, err := db.WorkerTokens(context.Background(), nil)
	if err != nil {
		t.Fatalf("WorkerTokens = %v; want nil", err)
	}
	t.Cleanup(s.Close) // before db.Close, registered earlier
	return db, s
}

// A revocation on one replica reaches another's memory through the notification, well before
// the fallback poll.
func TestRevocationReachesOtherReplica(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	_, a := openTokens(t, url)
	_, b := openTokens(t, url)
	ctx := context.Background()
	if err := a.RevokeWorker(ctx, "ep1-w1", time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("RevokeWorker = %v; want nil", err)
	}
	// Within 8 s: the fallback poll, every 10 s, cannot be what brings it.
	testkit.EventuallyWithin(t, 8*time.Second, "the other replica to see the revocation", func() bool {
		revoked, err := b.WorkerRevoked(ctx, "ep1-w1")
		return err == nil && revoked
	})
	if revoked, _ := b.WorkerRevoked(ctx, "ep1-w2"); revoked {
		t.Error("WorkerRevoked(ep1-w2) = true on the other replica; want false")
	}
}

// A deposed leader's store write, made through Fence, is refused and leaves nothing; the
// current leader's commits; a fenced write that fails rolls back what it wrote.
func TestFencedStoreWrites(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := open(t, url)
	ls := db.Leases()
	ctx := context.Background()
	ep := func(id string) core.Endpoint {
		return core.Endpoint{ID: id, Owner: "alice", Name: id, CreatedAt: time.Now()}
	}
	old, err := ls.Acquire(ctx, "scheduler", "a", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx, old); err != nil { // a's term ends; b's begins
		t.Fatal(err)
	}
	cur, err := ls.Acquire(ctx, "scheduler", "b", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	err = ls.Fence(ctx, old, func(ctx context.Context) error { return db.PutEndpoint(ctx, ep("fromdeposed")) })
	if !errors.Is(err, core.ErrDeposed) {
		t.Errorf("deposed a's fenced PutEndpoint = %v; want core.ErrDeposed", err)
	}
	if _, err := db.GetEndpoint(ctx, "fromdeposed"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("GetEndpoint(fromdeposed) = %v; want core.ErrNotFound: the refused write left nothing", err)
	}
	if err := ls.Fence(ctx, cur, func(ctx context.Context) error { return db.PutEndpoint(ctx, ep("fromleader")) }); err != nil {
		t.Fatalf("leader b's fenced PutEndpoint = %v; want nil", err)
	}
	if _, err := db.GetEndpoint(ctx, "fromleader"); err != nil {
		t.Errorf("GetEndpoint(fromleader) = %v; want it committed", err)
	}
	boom := errors.New("a later step failed")
	err = ls.Fence(ctx, cur, func(ctx context.Context) error {
		if err := db.PutEndpoint(ctx, ep("halfdone")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("a failing fenced write = %v; want %v", err, boom)
	}
	if _, err := db.GetEndpoint(ctx, "halfdone"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("GetEndpoint(halfdone) = %v; want core.ErrNotFound: the failed write rolled back", err)
	}
}

// Every replica hears of the endpoints another creates, updates and deletes, by id, after a
// first call that says to read them all.
func TestFollowEndpoints(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := open(t, url), open(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	heard := make(chan string, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.FollowEndpoints(ctx, nil, func(_ context.Context, id string) { heard <- id })
	}()
	t.Cleanup(func() { cancel(); <-done })
	next := func(what string) string {
		t.Helper()
		select {
		case id := <-heard:
			return id
		case <-time.After(testkit.WaitTimeout):
			t.Fatalf("no change heard after %s", what)
			return ""
		}
	}
	if id := next("following"); id != "" {
		t.Fatalf("first call = %q; want \"\" (read them all)", id)
	}
	e := core.Endpoint{ID: "ep1", Owner: "alice", CreatedAt: time.Now()}
	if err := a.PutEndpoint(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if id := next("a put"); id != "ep1" {
		t.Errorf("after a put heard %q; want ep1", id)
	}
	if err := a.DeleteEndpoint(context.Background(), "ep1"); err != nil {
		t.Fatal(err)
	}
	if id := next("a delete"); id != "ep1" {
		t.Errorf("after a delete heard %q; want ep1", id)
	}
	if err := a.DeleteEndpoint(context.Background(), "ep1"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("deleting again = %v; want core.ErrNotFound", err)
	}
}

// TestHistorySharedByReplicas: two replicas on one database add to the same minute at once,
// and each reads the sum of both.
func TestHistorySharedByReplicas(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := open(t, url), open(t, url)
	at := time.Date(2026, 11, 27, 17, 0, 0, 0, time.UTC)
	one := core.HistoryCounts{Completed: 1, ExecSumMs: 700}
	one.Exec[7] = 1
	done := make(chan error, 2)
	for _, db := range []*postgres.DB{a, b} {
		go func() {
			for range 20 {
				if err := db.AddHistory(context.Background(), []core.HistoryRecord{{Endpoint: "ep-a", At: at, Counts: one}}); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("AddHistory = %v; want nil", err)
		}
	}
	for name, db := range map[string]*postgres.DB{"a": a, "b": b} {
		recs, err := db.ScanHistory(context.Background(), "ep-a", at, at.Add(time.Minute))
		if err != nil || len(recs) != 1 {
			t.Fatalf("replica %s: ScanHistory = %+v, %v; want one record", name, recs, err)
		}
		if c := recs[0].Counts; c.Completed != 40 || c.Exec[7] != 40 || c.ExecSumMs != 28000 {
			t.Errorf("replica %s: counts = %+v; want 40 completed, Exec[7] 40, ExecSumMs 28000", name, c)
		}
	}
}
