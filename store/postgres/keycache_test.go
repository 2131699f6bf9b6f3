package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/internal/startstop"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/store/postgres"
)

// openKeyCache opens a store on url and a listening key cache over it, closed when the test ends.
func openKeyCache(t *testing.T, url string) (*postgres.DB, *postgres.KeyCache) {
	t.Helper()
	db := open(t, url)
	c := db.KeyCache(nil)
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("KeyCache.Start = %v; want nil", err)
	}
	t.Cleanup(c.Stop) // before db.Close, registered earlier
	testkit.Eventually(t, "the key cache to listen", c.Listening)
	return db, c
}

// A replica's cache answers from memory once it has read a key, and forgets the key as soon
// as any replica, or `gantry keys` through the store itself, changes it.
func TestKeyCacheFollowsOtherReplicas(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	_, b := openKeyCache(t, url)
	ctx := context.Background()
	k := core.Key{ID: "k1", Hash: core.HashKey("gk_one"), User: "alice", Scope: core.ScopeAll, CreatedAt: time.Now().UTC()}
	if err := b.PutKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := b.PutUser(ctx, core.User{Name: "alice", Quota: &core.Quota{Minute: 5}}); err != nil {
		t.Fatal(err)
	}
	dbA, a := openKeyCache(t, url) // after the writes: no announcement of them is on its way to A
	if _, err := a.LookupKey(ctx, k.Hash); err != nil {
		t.Fatalf("LookupKey on A = %v; want the key", err)
	}
	if u, err := a.GetUser(ctx, "alice"); err != nil || u.Quota.Minute != 5 {
		t.Fatalf("GetUser on A = %+v, %v; want quota 5 a minute", u, err)
	}

	// Changed behind the caches' backs (no announcement): A answers from memory.
	if _, err := dbA.Pool.Exec(ctx, `UPDATE gantry_users SET body = '{"name":"alice","quota":{"minute":7}}'`); err != nil {
		t.Fatal(err)
	}
	if u, _ := a.GetUser(ctx, "alice"); u.Quota == nil || u.Quota.Minute != 5 {
		t.Fatalf("GetUser on A = %+v; want the cached quota 5 (no statement)", u)
	}

	// Changed through a store: A hears of it well within the cache's 10 s life.
	if err := b.PutUser(ctx, core.User{Name: "alice", Quota: &core.Quota{Minute: 9}}); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, 5*time.Second, "A to see alice's new quota", func() bool {
		u, err := a.GetUser(ctx, "alice")
		return err == nil && u.Quota != nil && u.Quota.Minute == 9
	})
	if _, err := dbA.DeleteKey(ctx, "", "k1"); err != nil { // as `gantry keys revoke --store` does
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, 5*time.Second, "A to refuse the revoked key", func() bool {
		_, err := a.LookupKey(ctx, k.Hash)
		return errors.Is(err, core.ErrNotFound)
	})
	if _, err := b.LookupKey(ctx, k.Hash); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("LookupKey on B = %v; want ErrNotFound", err)
	}
}

// A change made through a cache is seen by its own next lookup at once.
func TestKeyCacheOwnChangesAtOnce(t *testing.T) {
	t.Parallel()
	_, c := openKeyCache(t, pgtest.URL(t))
	ctx := context.Background()
	k := core.Key{ID: "k1", Hash: core.HashKey("gk_one"), User: "alice", Scope: core.ScopeAll, CreatedAt: time.Now().UTC()}
	if err := c.PutKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.LookupKey(ctx, k.Hash); err != nil {
			t.Fatalf("LookupKey = %v; want the key", err)
		}
	}
	if _, err := c.DeleteKey(ctx, "alice", "k1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.LookupKey(ctx, k.Hash); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("LookupKey after DeleteKey = %v; want ErrNotFound at once", err)
	}
}

// The cache starts and stops as every long-running service does: a second Start is refused,
// Stop ends the following and keeps nothing, and the cache can start again.
func TestKeyCacheStartStop(t *testing.T) {
	t.Parallel()
	_, c := openKeyCache(t, pgtest.URL(t))
	if err := c.Start(context.Background()); !errors.Is(err, startstop.ErrStarted) {
		t.Fatalf("second Start = %v; want startstop.ErrStarted", err)
	}
	c.Stop()
	if c.Listening() {
		t.Error("Listening after Stop = true; want false: the cache keeps nothing")
	}
	c.Stop() // a second Stop does nothing
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("Start after Stop = %v; want nil", err)
	}
	testkit.Eventually(t, "the restarted key cache to listen", c.Listening)
}
