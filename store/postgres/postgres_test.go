package postgres_test

import (
	"context"
	"sync"
	"testing"

	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/store/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Replicas that start at the same moment apply each migration once, and a restart applies
// nothing twice.
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := postgres.Open(ctx, url)
			if err == nil {
				db.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	db, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n, distinct int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT version) FROM gantry_migrations").Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n == 0 || n != distinct {
		t.Fatalf("gantry_migrations has %d rows, %d versions: want each migration once", n, distinct)
	}
}

func TestOpenBadURL(t *testing.T) {
	if _, err := postgres.Open(context.Background(), "postgres://127.0.0.1:1/none?connect_timeout=1"); err == nil {
		t.Fatal("Open of an unreachable server succeeded")
	}
}
