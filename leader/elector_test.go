package leader_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/leader"
)

// cuttable is Leases that a test can cut off, as a replica loses its database.
type cuttable struct {
	core.Leases
	cut atomic.Bool
}

var errCut = errors.New("the database is unreachable")

func (c *cuttable) Acquire(ctx context.Context, name, holder, address string, ttl time.Duration) (core.Lease, error) {
	if c.cut.Load() {
		return core.Lease{}, errCut
	}
	return c.Leases.Acquire(ctx, name, holder, address, ttl)
}

func (c *cuttable) Release(ctx context.Context, l core.Lease) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Leases.Release(ctx, l)
}

// replica is an Elector under test, recording its terms.
type replica struct {
	e       *leader.Elector
	leases  *cuttable
	leading atomic.Int64 // the epoch of the term Lead runs, 0 = none
}

func startReplica(t *testing.T, shared core.Leases, holder string, ttl time.Duration) *replica {
	t.Helper()
	return startReplicaAt(t, shared, holder, "", ttl)
}

// startReplicaAt starts a replica that publishes address with its lease.
func startReplicaAt(t *testing.T, shared core.Leases, holder, address string, ttl time.Duration) *replica {
	t.Helper()
	r := &replica{leases: &cuttable{Leases: shared}}
	r.e = &leader.Elector{Leases: r.leases, Name: "scheduler", Holder: holder, Address: address, TTL: ttl, Log: slog.New(slog.DiscardHandler),
		Lead: func(ctx context.Context, l core.Lease) {
			r.leading.Store(l.Epoch)
			<-ctx.Done()
			r.leading.Store(0)
		}}
	if err := r.e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.e.Stop)
	return r
}

// TestElectorOneLeaderAndHandover: of two replicas one leads; when it stops, it ends its
// Lead, releases the lease, and the other leads at its next try, in a later term, without
// waiting out the lease.
func TestElectorOneLeaderAndHandover(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second // tries every second
	shared := &core.MemoryLeases{}
	a := startReplica(t, shared, "a", ttl)
	testkit.Eventually(t, "a to lead", func() bool { return a.leading.Load() != 0 })
	b := startReplica(t, shared, "b", ttl)
	first := a.leading.Load()
	if _, ok := b.e.Leading(); ok {
		t.Fatal("b leads while a holds the lease")
	}
	a.e.Stop() // returns once the term ended and the lease was released
	stopped := time.Now()
	if a.leading.Load() != 0 {
		t.Error("a's Lead still runs after its Stop returned")
	}
	testkit.Eventually(t, "b to lead after a released", func() bool { return b.leading.Load() != 0 })
	if took := time.Since(stopped); took > ttl-ttl/6 {
		t.Errorf("b led %v after a stopped; want sooner than the lease (%v): a released it", took, ttl)
	}
	if got := b.leading.Load(); got <= first {
		t.Errorf("b's term has epoch %d after a's %d; want later", got, first)
	}
}

// TestElectorLostLeaderReplaced: a leader cut off from the store stops leading before its
// lease can have expired, and another replica leads within two lease periods.
func TestElectorLostLeaderReplaced(t *testing.T) {
	t.Parallel()
	const ttl = 600 * time.Millisecond
	shared := &core.MemoryLeases{}
	a := startReplica(t, shared, "a", ttl)
	testkit.Eventually(t, "a to lead", func() bool { return a.leading.Load() != 0 })
	b := startReplica(t, shared, "b", ttl)
	lease, _ := a.e.Leading()
	a.leases.cut.Store(true)
	cutAt := time.Now()
	testkit.Eventually(t, "a to stop leading once cut off", func() bool { return a.leading.Load() == 0 })
	if stopped := time.Now(); stopped.After(lease.Expires) {
		t.Errorf("a stopped leading at %v, after its lease expired at %v", stopped, lease.Expires)
	}
	testkit.Eventually(t, "b to lead", func() bool { return b.leading.Load() != 0 })
	if took := time.Since(cutAt); took > 2*ttl+ttl/2 { // the bound, with room for a loaded machine
		t.Errorf("b led %v after a was cut off; want within two lease periods (%v)", took, 2*ttl)
	}
	if b.leading.Load() <= lease.Epoch {
		t.Errorf("b's epoch %d is not after a's %d", b.leading.Load(), lease.Epoch)
	}
}

// TestElectorLeaderAddress: a follower learns the leader and its address from its refused
// tries; the leader names itself; after a handover the follower that took over names itself,
// and one that lost its lease names nobody until it sees the next holder.
func TestElectorLeaderAddress(t *testing.T) {
	t.Parallel()
	const ttl = 600 * time.Millisecond
	shared := &core.MemoryLeases{}
	a := startReplicaAt(t, shared, "a", "http://10.0.0.1:8080", ttl)
	testkit.Eventually(t, "a to lead", func() bool { return a.leading.Load() != 0 })
	b := startReplicaAt(t, shared, "b", "http://10.0.0.2:8080", ttl)
	if l, ok := a.e.Leader(); !ok || l.Holder != "a" || l.Address != "http://10.0.0.1:8080" {
		t.Errorf("a's Leader() = %+v, %v; want itself, at its address", l, ok)
	}
	testkit.Eventually(t, "b to learn a's address", func() bool {
		l, ok := b.e.Leader()
		return ok && l.Holder == "a" && l.Address == "http://10.0.0.1:8080"
	})
	a.leases.cut.Store(true)
	testkit.Eventually(t, "b to lead", func() bool { return b.leading.Load() != 0 })
	if l, ok := b.e.Leader(); !ok || l.Holder != "b" || l.Address != "http://10.0.0.2:8080" {
		t.Errorf("b's Leader() once it leads = %+v, %v; want itself", l, ok)
	}
	testkit.Eventually(t, "a to stop leading", func() bool { return a.leading.Load() == 0 })
	if l, ok := a.e.Leader(); ok {
		t.Errorf("a's Leader() cut off after it led = %+v; want none: its own term is over, the next unseen", l)
	}
	a.leases.cut.Store(false)
	testkit.Eventually(t, "a to learn b's address", func() bool {
		l, ok := a.e.Leader()
		return ok && l.Holder == "b" && l.Address == "http://10.0.0.2:8080"
	})
}
