package leader_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/leader"
)

// startRoster starts a replica's roster on shared leases.
func startRoster(t *testing.T, leases core.Leases, holder, address, local string, ttl time.Duration) *leader.Roster {
	t.Helper()
	r := &leader.Roster{Leases: leases, Holder: holder, Address: address, Local: local, TTL: ttl, Log: slog.New(slog.DiscardHandler)}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// waitURLs waits until r lists want, and returns the version it did so at.
func waitURLs(t *testing.T, r *leader.Roster, want []string, why string) uint64 {
	t.Helper()
	var ver uint64
	testkit.Eventually(t, fmt.Sprintf("%s: URLs() = %v", why, want), func() bool {
		var got []string
		got, ver = r.URLs()
		return slices.Equal(got, want)
	})
	return ver
}

// TestRosterListsLiveReplicas: each replica sees every live one that published an address,
// its own as its local URL; one that stops leaves at once, one cut off from the store when its
// presence lapses, and each change moves the version.
func TestRosterListsLiveReplicas(t *testing.T) {
	t.Parallel()
	shared := &core.MemoryLeases{}
	const ttl = 300 * time.Millisecond
	a := startRoster(t, shared, "a", "http://10.0.0.1:8080", "http://127.0.0.1:1", ttl)
	if got, ver := a.URLs(); len(got) != 1 || got[0] != "http://127.0.0.1:1" {
		t.Errorf("URLs() before the first read = %v (version %d); want the local URL alone", got, ver)
	}
	b := startRoster(t, shared, "b", "http://10.0.0.2:8080", "http://127.0.0.1:2", ttl)
	cut := &cuttable{Leases: shared}
	startRoster(t, cut, "c", "http://10.0.0.3:8080", "", ttl)
	startRoster(t, shared, "d", "", "http://127.0.0.1:4", ttl) // no address: no one sends workers there
	all := waitURLs(t, a, []string{"http://10.0.0.2:8080", "http://10.0.0.3:8080", "http://127.0.0.1:1"}, "three replicas with addresses")
	waitURLs(t, b, []string{"http://10.0.0.1:8080", "http://10.0.0.3:8080", "http://127.0.0.1:2"}, "b's view")

	b.Stop()
	left := waitURLs(t, a, []string{"http://10.0.0.3:8080", "http://127.0.0.1:1"}, "after b stopped")
	if left == all {
		t.Errorf("version %d unchanged after b left", left)
	}
	cut.cut.Store(true) // c can no longer renew: it leaves when its presence lapses
	if ver := waitURLs(t, a, []string{"http://127.0.0.1:1"}, "after c was cut off"); ver == left {
		t.Errorf("version %d unchanged after c left", ver)
	}
}
