package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// RunWorkerTokenStore runs the conformance suite against a core.WorkerTokenStore: named
// secrets created once, revocations seen at once, both kept across a restart, and worker
// tokens that one core.WorkerTokens issues and another over the same store (another replica)
// checks.
func RunWorkerTokenStore(t *testing.T, opener Opener[core.WorkerTokenStore]) {
	t.Helper()
	ctx := context.Background()
	open := func(t *testing.T) core.WorkerTokenStore { st, _ := opener(t); return st }
	secret := func(t *testing.T, st core.SecretStore, name string, fresh []byte) []byte {
		t.Helper()
		got, err := st.Secret(ctx, name, fresh)
		if err != nil {
			t.Fatalf("Secret(%q) = %v; want nil", name, err)
		}
		return got
	}
	revoked := func(t *testing.T, st core.WorkerRevocations, worker string) bool {
		t.Helper()
		r, err := st.WorkerRevoked(ctx, worker)
		if err != nil {
			t.Fatalf("WorkerRevoked(%q) = %v; want nil", worker, err)
		}
		return r
	}

	t.Run("SecretCreatedOnce", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		first, second := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
		if got := secret(t, st, "a", first); !bytes.Equal(got, first) {
			t.Fatalf("Secret(a, first) = %x; want %x (stored)", got, first)
		}
		if got := secret(t, st, "a", second); !bytes.Equal(got, first) {
			t.Errorf("Secret(a, second) = %x; want the first %x kept", got, first)
		}
		if got := secret(t, st, "b", second); !bytes.Equal(got, second) {
			t.Errorf("Secret(b, second) = %x; want %x: names are separate", got, second)
		}
	})

	t.Run("SecretNotAliased", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		fresh := bytes.Repeat([]byte{7}, 32)
		got := secret(t, st, "k", fresh)
		fresh[0], got[1] = 0, 0 // neither the caller's slice nor the returned one is the stored one
		if again := secret(t, st, "k", []byte{9}); !bytes.Equal(again, bytes.Repeat([]byte{7}, 32)) {
			t.Errorf("Secret(k) after changing the slices = %x; want %x", again, bytes.Repeat([]byte{7}, 32))
		}
	})

	t.Run("SecretRaceHasOneWinner", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		const n = 16
		got := make([][]byte, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				v, err := st.Secret(ctx, "raced", bytes.Repeat([]byte{byte(i + 1)}, 32))
				if err != nil {
					t.Errorf("Secret(raced) #%d = %v; want nil", i, err)
				}
				got[i] = v
			})
		}
		wg.Wait()
		for i := range got {
			if !bytes.Equal(got[i], got[0]) || len(got[0]) != 32 {
				t.Fatalf("racing Secret calls got %x and %x; want one secret for all", got[0], got[i])
			}
		}
	})

	t.Run("RevocationSeenAtOnce", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		if revoked(t, st, "ep1-w1") {
			t.Fatal("WorkerRevoked(ep1-w1) in an empty store = true; want false")
		}
		until := time.Now().Add(time.Hour)
		for range 2 { // revoking again changes nothing
			if err := st.RevokeWorker(ctx, "ep1-w1", until); err != nil {
				t.Fatalf("RevokeWorker(ep1-w1) = %v; want nil", err)
			}
			if !revoked(t, st, "ep1-w1") {
				t.Errorf("WorkerRevoked(ep1-w1) after RevokeWorker = false; want true")
			}
		}
		if err := st.RevokeWorker(ctx, "ep1-w1", until.Add(-time.Minute)); err != nil || !revoked(t, st, "ep1-w1") {
			t.Errorf("RevokeWorker(ep1-w1, an earlier until) = %v, revoked %v; want nil, still revoked", err, revoked(t, st, "ep1-w1"))
		}
		for _, other := range []string{"ep1-w2", "ep1-w", "ep1-w1x", "ep2-w1"} {
			if revoked(t, st, other) {
				t.Errorf("WorkerRevoked(%q) = true; want false: only ep1-w1 was revoked", other)
			}
		}
	})

	t.Run("ConcurrentRevocations", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		const n = 32
		until := time.Now().Add(time.Hour)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				w := fmt.Sprintf("ep1-w%d", i)
				if err := st.RevokeWorker(ctx, w, until); err != nil {
					t.Errorf("RevokeWorker(%s) = %v; want nil", w, err)
				}
			})
			wg.Go(func() { _, _ = st.WorkerRevoked(ctx, fmt.Sprintf("ep1-w%d", i)) })
		}
		wg.Wait()
		for i := range n {
			if w := fmt.Sprintf("ep1-w%d", i); !revoked(t, st, w) {
				t.Errorf("WorkerRevoked(%s) after concurrent revocations = false; want true", w)
			}
		}
	})

	t.Run("KeptAcrossRestart", func(t *testing.T) {
		t.Parallel()
		st, reopen := opener(t)
		if reopen == nil {
			t.Skip("the store keeps nothing across a restart")
		}
		key := bytes.Repeat([]byte{5}, 32)
		secret(t, st, "k", key)
		if err := st.RevokeWorker(ctx, "ep1-w1", time.Now().Add(time.Hour)); err != nil {
			t.Fatalf("RevokeWorker(ep1-w1) = %v; want nil", err)
		}
		st = reopen()
		if got := secret(t, st, "k", []byte("another")); !bytes.Equal(got, key) {
			t.Errorf("Secret(k) after a restart = %x; want %x: tokens must outlive a restart", got, key)
		}
		if !revoked(t, st, "ep1-w1") || revoked(t, st, "ep1-w2") {
			t.Errorf("after a restart WorkerRevoked(ep1-w1), (ep1-w2) = %v, %v; want true, false",
				revoked(t, st, "ep1-w1"), revoked(t, st, "ep1-w2"))
		}
	})

	t.Run("DoneContext", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		for _, dc := range doneContexts(t) {
			if _, err := st.Secret(dc.ctx, "k", []byte("v")); !errors.Is(err, dc.want) {
				t.Errorf("Secret(%s) = %v; want %v", dc.name, err, dc.want)
			}
			if err := st.RevokeWorker(dc.ctx, "ep1-w1", time.Now().Add(time.Hour)); !errors.Is(err, dc.want) {
				t.Errorf("RevokeWorker(%s) = %v; want %v", dc.name, err, dc.want)
			}
			if _, err := st.WorkerRevoked(dc.ctx, "ep1-w1"); !errors.Is(err, dc.want) {
				t.Errorf("WorkerRevoked(%s) = %v; want %v", dc.name, err, dc.want)
			}
		}
		// Nothing was written.
		if got := secret(t, st, "k", []byte("fresh")); string(got) != "fresh" {
			t.Errorf("Secret(k) after a done Secret = %q; want %q: nothing stored before", got, "fresh")
		}
		if revoked(t, st, "ep1-w1") {
			t.Errorf("WorkerRevoked(ep1-w1) after a done RevokeWorker = true; want false")
		}
	})

	t.Run("TokensAcrossReplicas", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		clock := tokenClock(time.Now())
		issuer, err := core.NewWorkerTokens(ctx, st, clock)
		if err != nil {
			t.Fatalf("NewWorkerTokens = %v; want nil", err)
		}
		other, err := core.NewWorkerTokens(ctx, st, clock) // another replica over the same store
		if err != nil {
			t.Fatalf("NewWorkerTokens (second) = %v; want nil", err)
		}
		tok := issuer.Issue("ep1", "ep1-w1")
		if _, err := other.Check(ctx, tok, "ep1", "ep1-w1"); err != nil {
			t.Fatalf("another replica's Check(token of ep1-w1) = %v; want nil", err)
		}
		if err := other.Revoke(ctx, "ep1-w1"); err != nil {
			t.Fatalf("Revoke(ep1-w1) = %v; want nil", err)
		}
		if _, err := issuer.Check(ctx, tok, "ep1", "ep1-w1"); core.KindOf(err) != core.KindUnauthorized {
			t.Errorf("issuer's Check(token revoked by another replica) = %v; want unauthorized", err)
		}
		tok2 := other.Issue("ep1", "ep1-w2")
		if _, err := issuer.Check(ctx, tok2, "ep1", "ep1-w2"); err != nil {
			t.Errorf("Check(token of ep1-w2, not revoked) = %v; want nil", err)
		}
	})
}

// tokenClock is a core.Clock that always reads the same time.
type tokenClock time.Time

func (c tokenClock) Now() time.Time { return time.Time(c) }
