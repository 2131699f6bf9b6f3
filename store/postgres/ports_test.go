package postgres_test

import (
	"context"
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

func TestEndpointStore(t *testing.T) {
	t.Parallel()
	storetest.RunEndpointStore(t, opener(func(_ *testing.T, db *postgres.DB) core.EndpointStore { return db }))
}

func TestTemplateStore(t *testing.T) {
	t.Parallel()
	storetest.RunTemplateStore(t, opener(func(_ *testing.T, db *postgres.DB) core.TemplateStore { return db }))
}

func TestKeyStore(t *testing.T) {
	t.Parallel()
	storetest.RunKeyStore(t, opener(func(_ *testing.T, db *postgres.DB) core.KeyStore { return db }))
}

func TestUsageStore(t *testing.T) {
	t.Parallel()
	storetest.RunUsageStore(t, opener(func(_ *testing.T, db *postgres.DB) core.UsageStore { return db }))
}

func TestFileStore(t *testing.T) {
	t.Parallel()
	storetest.RunFileStore(t, opener(func(_ *testing.T, db *postgres.DB) core.FileStore { return db }))
}

func TestRateLimits(t *testing.T) {
	t.Parallel()
	storetest.RunRateLimits(t, opener(func(_ *testing.T, db *postgres.DB) core.RateLimits { return db.RateLimits() }))
}

func TestWorkerTokenStore(t *testing.T) {
	t.Parallel()
	// The follower holds a connection of the pool: it stops before its pool closes.
	storetest.RunWorkerTokenStore(t, func(t *testing.T) (core.WorkerTokenStore, func() core.WorkerTokenStore) {
		url := pgtest.URL(t)
		db, s := openTokens(t, url)
		return s, func() core.WorkerTokenStore {
			s.Close()
			db.Close()
			db, s = openTokens(t, url)
			return s
		}
	})
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
