package scaleout_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/store/memq"
)

// OpenStores on PostgreSQL opens what replicas need besides the ports: the leases, the health
// check, and endpoints that follow the other replicas' changes (server.EndpointFollower).
// Close releases every connection, the key cache's and the job store's listeners included.
func TestOpenStoresShared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	st, err := server.OpenStores(ctx, server.Config{Store: url}, nil)
	if err != nil {
		t.Fatalf("OpenStores = %v; want nil", err)
	}
	closed := false
	defer func() {
		if !closed {
			st.Close()
		}
	}()
	if _, ok := st.Endpoints.(server.EndpointFollower); !ok {
		t.Error("the shared endpoint store is no EndpointFollower")
	}
	if st.Leases == nil || st.Check == nil || st.Pebble != nil {
		t.Errorf("Stores.Leases, Check, Pebble = %v, %v, %v; want leases, a check and no Pebble", st.Leases, st.Check != nil, st.Pebble)
	}
	if err := st.Check(ctx); err != nil {
		t.Errorf("Stores.Check = %v; want nil", err)
	}
	if _, err := st.Jobs(ctx, memq.Options{}); err != nil {
		t.Fatalf("Stores.Jobs = %v; want nil", err)
	}
	st.Close()
	closed = true
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	testkit.Eventually(t, "every connection of the closed stores to end", func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n)
		return err == nil && n == 0
	})
}
