package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// RunLeases runs the conformance suite of core.Leases: terms and their epochs, renewal,
// expiry and release, fencing of a deposed holder's writes, one winner of a race, and a done
// context. Leases expire by the store's own clock, so the expiry tests wait (a fraction of a
// second) for real time to pass.
func RunLeases(t *testing.T, opener Opener[core.Leases]) {
	t.Helper()
	ctx := context.Background()
	open := func(t *testing.T) core.Leases { l, _ := opener(t); return l }
	acquire := func(t *testing.T, ls core.Leases, name, holder string, ttl time.Duration) core.Lease {
		t.Helper()
		l, err := ls.Acquire(ctx, name, holder, "", ttl)
		if err != nil {
			t.Fatalf("Acquire(%q, %q) = %v; want nil", name, holder, err)
		}
		if l.Name != name || l.Holder != holder || l.Epoch < 1 {
			t.Fatalf("Acquire(%q, %q) = %+v; want the lease of %s with an epoch", name, holder, l, holder)
		}
		return l
	}
	// takeOver waits for holder to win the lease another holds with a short ttl.
	takeOver := func(t *testing.T, ls core.Leases, name, holder string) core.Lease {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			l, err := ls.Acquire(ctx, name, holder, "", time.Hour)
			if err == nil {
				return l
			}
			if !errors.Is(err, core.ErrLeaseHeld) {
				t.Fatalf("Acquire(%q, %q) = %v; want nil or core.ErrLeaseHeld", name, holder, err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("Acquire(%q, %q) still refused 30 s after the holder's lease was to expire", name, holder)
			}
			time.Sleep(20 * time.Millisecond) // polling the store's clock, not synchronising
		}
	}

	t.Run("TermsAndRenewal", func(t *testing.T) {
		t.Parallel()
		ls := open(t)
		first := acquire(t, ls, "scheduler", "a", time.Minute)
		again := acquire(t, ls, "scheduler", "a", time.Hour)
		if again.Epoch != first.Epoch {
			t.Errorf("renewing: epoch %d, then %d; want the same term", first.Epoch, again.Epoch)
		}
		if !again.Expires.After(first.Expires) {
			t.Errorf("renewing for an hour: expires %v, then %v; want later", first.Expires, again.Expires)
		}
		if _, err := ls.Acquire(ctx, "scheduler", "b", "", time.Minute); !errors.Is(err, core.ErrLeaseHeld) {
			t.Errorf("Acquire by b of a's live lease = %v; want core.ErrLeaseHeld", err)
		}
		if other := acquire(t, ls, "other", "b", time.Minute); other.Holder != "b" {
			t.Errorf("Acquire of another name = %+v; want b's: names are apart", other)
		}
	})

	t.Run("Address", func(t *testing.T) {
		t.Parallel()
		ls := open(t)
		// The holder publishes where it is reached; a refused Acquire names the holder and
		// its address, which is how followers find the leader.
		a, err := ls.Acquire(ctx, "scheduler", "a", "http://10.0.0.1:8080", time.Hour)
		if err != nil || a.Address != "http://10.0.0.1:8080" {
			t.Fatalf("Acquire by a = %+v, %v; want a's lease with its address", a, err)
		}
		cur, err := ls.Acquire(ctx, "scheduler", "b", "http://10.0.0.2:8080", time.Hour)
		if !errors.Is(err, core.ErrLeaseHeld) {
			t.Fatalf("Acquire by b of a's live lease = %v; want core.ErrLeaseHeld", err)
		}
		if cur.Holder != "a" || cur.Address != "http://10.0.0.1:8080" || cur.Epoch != a.Epoch {
			t.Errorf("the lease b was refused = %+v; want a's term (epoch %d) with a's address", cur, a.Epoch)
		}
		// A renewal republishes: a replica restarted with another peerUrl is found there.
		if again, err := ls.Acquire(ctx, "scheduler", "a", "http://10.0.0.3:8080", time.Hour); err != nil || again.Address != "http://10.0.0.3:8080" || again.Epoch != a.Epoch {
			t.Errorf("renewal with a new address = %+v, %v; want the same term at the new address", again, err)
		}
		if cur, _ := ls.Acquire(ctx, "scheduler", "b", "", time.Hour); cur.Address != "http://10.0.0.3:8080" {
			t.Errorf("the lease b was refused after a's renewal = %+v; want a's new address", cur)
		}
		// The next holder's address replaces it, "" (none published) included.
		if err := ls.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
		if b, err := ls.Acquire(ctx, "scheduler", "b", "", time.Hour); err != nil || b.Address != "" {
			t.Errorf("b's term after a released = %+v, %v; want no address", b, err)
		}
		if cur, _ := ls.Acquire(ctx, "scheduler", "a", "http://10.0.0.1:8080", time.Hour); cur.Holder != "b" || cur.Address != "" {
			t.Errorf("the lease a was refused = %+v; want b's, with no address", cur)
		}
	})

	t.Run("ExpiryHandsOver", func(t *testing.T) {
		t.Parallel()
		ls := open(t)
		a := acquire(t, ls, "scheduler", "a", 200*time.Millisecond)
		b := takeOver(t, ls, "scheduler", "b")
		if b.Epoch <= a.Epoch {
			t.Errorf("b took the lapsed lease at epoch %d after a's %d; want a later epoch", b.Epoch, a.Epoch)
		}
		if _, err := ls.Acquire(ctx, "scheduler", "a", "", time.Minute); !errors.Is(err, core.ErrLeaseHeld) {
			t.Errorf("a's renewal after b took over = %v; want core.ErrLeaseHeld", err)
		}
	})

	t.Run("EndedOwnTermIsNewTerm", func(t *testing.T) {
		t.Parallel()
		ls := open(t)
		// A holder that takes its lease again after its term ended (here released; lapsed is
		// alike) starts a new term: what it did in the old one may have been fenced off.
		a := acquire(t, ls, "scheduler", "a", time.Hour)
		if err := ls.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
		again := acquire(t, ls, "scheduler", "a", time.Hour)
		if again.Epoch <= a.Epoch {
			t.Errorf("a's lease taken again after its term ended: epoch %d after %d; want a later one", again.Epoch, a.Epoch)
		}
		if err := ls.Fence(ctx, a, func(context.Context) error { return nil }); !errors.Is(err, core.ErrDeposed) {
			t.Errorf("Fence with a's ended term = %v; want core.ErrDeposed", err)
		}
	})

	t.Run("Release", func(t *testing.T) {
		t.Parallel()
		ls := open(t)
		a := acquire(t, ls, "scheduler", "a", time.Hour)
		if err := ls.Release(ctx, a); err != nil {
			t.Fatalf("Release = %v; want nil", err)
		}
		b := acquire(t, ls, "scheduler", "b", time.Hour) // at once: no hour to wait out
		if b.Epoch <= a.Epoch {
			t.Errorf("b's term after a released: epoch %d after %d; want later", b.Epoch, a.Epoch)
		}
		if err := ls.Release(ctx, a); err != nil { // a stale release
			t.Fatalf("Release of a passed-on term = %v; want nil", err)
		}
		if _, err := ls.Acquire(ctx, "scheduler", "c", "", time.Hour); !errors.Is(err, core.ErrLeaseHeld) {
			t.Errorf("Acquire by c after a stale release of a's term = %v; want core.ErrLeaseHeld (b still holds it)", err)
		}
	})

	t.Run("Live", func(t *testing.T) {
		t.Parallel()
		ls := open(t)
		for _, h := range []string{"b", "a", "c"} {
			if _, err := ls.Acquire(ctx, "replica/"+h, h, "http://"+h+":8080", time.Hour); err != nil {
				t.Fatalf("Acquire(replica/%s) = %v", h, err)
			}
		}
		gone, err := ls.Acquire(ctx, "replica/d", "d", "http://d:8080", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx, gone); err != nil {
			t.Fatal(err)
		}
		acquire(t, ls, "scheduler", "a", time.Hour)            // another prefix
		acquire(t, ls, "replica_x", "x", time.Hour)            // '_' is no wildcard
		acquire(t, ls, "replica/short", "s", time.Millisecond) // expires at once, by the store's clock
		want := []string{"a@http://a:8080", "b@http://b:8080", "c@http://c:8080"}
		var got []string
		deadline := time.Now().Add(30 * time.Second)
		for {
			live, err := ls.Live(ctx, "replica/")
			if err != nil {
				t.Fatalf("Live = %v", err)
			}
			got = got[:0]
			for _, l := range live {
				got = append(got, l.Holder+"@"+l.Address)
			}
			if slices.Equal(got, want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond) // polling the store's clock past the short lease's expiry
		}
		if !slices.Equal(got, want) {
			t.Errorf("Live(replica/) = %v; want %v (by name; not the released, expired or other-prefixed ones)", got, want)
		}
		for _, dc := range doneContexts(t) {
			_, err := ls.Live(dc.ctx, "replica/")
			checkDone(t, dc, "Live", err)
		}
	})

	t.Run("FenceRefusesDeposed", func(t *testing.T) {
		t.Parallel()
		ls := open(t)
		a := acquire(t, ls, "scheduler", "a", 200*time.Millisecond)
		ran := false
		if err := ls.Fence(ctx, a, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
			t.Fatalf("Fence by the current holder = %v, ran %v; want nil, ran", err, ran)
		}
		boom := errors.New("the write failed")
		if err := ls.Fence(ctx, a, func(context.Context) error { return boom }); !errors.Is(err, boom) {
			t.Errorf("Fence whose write fails = %v; want %v", err, boom)
		}
		b := takeOver(t, ls, "scheduler", "b")
		ran = false
		if err := ls.Fence(ctx, a, func(context.Context) error { ran = true; return nil }); !errors.Is(err, core.ErrDeposed) || ran {
			t.Errorf("Fence by deposed a = %v, ran %v; want core.ErrDeposed, not ran", err, ran)
		}
		if err := ls.Fence(ctx, b, func(context.Context) error { return nil }); err != nil {
			t.Errorf("Fence by the new holder b = %v; want nil", err)
		}
		stale := b
		stale.Epoch--
		if err := ls.Fence(ctx, stale, func(context.Context) error { return nil }); !errors.Is(err, core.ErrDeposed) {
			t.Errorf("Fence by b with an old epoch = %v; want core.ErrDeposed: the epoch fences, not the name", err)
		}
		if err := ls.Fence(ctx, core.Lease{Name: "never", Holder: "a", Epoch: 1}, func(context.Context) error { return nil }); !errors.Is(err, core.ErrDeposed) {
			t.Errorf("Fence of a lease never taken = %v; want core.ErrDeposed", err)
		}
	})

	t.Run("RaceHasOneWinner", func(t *testing.T) {
		t.Parallel()
		ls := open(t)
		const n = 8
		won := make([]bool, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				_, err := ls.Acquire(ctx, "scheduler", fmt.Sprintf("r%d", i), "", time.Hour)
				won[i] = err == nil
				if err != nil && !errors.Is(err, core.ErrLeaseHeld) {
					t.Errorf("Acquire by r%d = %v; want nil or core.ErrLeaseHeld", i, err)
				}
			})
		}
		wg.Wait()
		winners := 0
		for _, w := range won {
			if w {
				winners++
			}
		}
		if winners != 1 {
			t.Errorf("%d replicas racing for a free lease: %d won; want 1", n, winners)
		}
	})

	t.Run("ContextDone", func(t *testing.T) {
		t.Parallel()
		ls := open(t)
		a := acquire(t, ls, "scheduler", "a", time.Hour)
		for _, dc := range doneContexts(t) {
			_, err := ls.Acquire(dc.ctx, "other", "a", "", time.Hour)
			checkDone(t, dc, `Acquire("other")`, err)
			checkDone(t, dc, "Release(a)", ls.Release(dc.ctx, a))
			ran := false
			checkDone(t, dc, "Fence(a)", ls.Fence(dc.ctx, a, func(context.Context) error { ran = true; return nil }))
			if ran {
				t.Errorf("Fence with a context %s ran the write", dc.name)
			}
		}
		if _, err := ls.Acquire(ctx, "scheduler", "b", "", time.Hour); !errors.Is(err, core.ErrLeaseHeld) {
			t.Errorf("Acquire by b after refused releases = %v; want core.ErrLeaseHeld", err)
		}
		if _, err := ls.Acquire(ctx, "other", "b", "", time.Hour); err != nil {
			t.Errorf("Acquire(other) by b after a refused Acquire by a = %v; want nil: nothing was taken", err)
		}
	})
}
