package pebble_test

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/pebble"
	"github.com/gantryhq/gantry/store/storetest"
)

func TestWorkerTokenStore(t *testing.T) {
	t.Parallel()
	storetest.RunWorkerTokenStore(t, func(t *testing.T) core.WorkerTokenStore { return open(t, t.TempDir()) })
}

// TestSecretsAndRevocationsSurviveReopen checks that a restart keeps the key (so running
// workers' tokens stay valid) and the revocations still in force, and forgets expired ones.
func TestSecretsAndRevocationsSurviveReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	key := bytes.Repeat([]byte{5}, 32)
	s, err := pebble.Open(dir)
	if err != nil {
		t.Fatalf("Open(%q) = %v; want nil", dir, err)
	}
	if _, err := s.Secret(ctx, "k", key); err != nil {
		t.Fatalf("Secret(k) = %v; want nil", err)
	}
	if err := s.RevokeWorker(ctx, "ep1-live", time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("RevokeWorker(ep1-live) = %v; want nil", err)
	}
	if err := s.RevokeWorker(ctx, "ep1-old", time.Now().Add(-time.Second)); err != nil {
		t.Fatalf("RevokeWorker(ep1-old) = %v; want nil", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v; want nil", err)
	}

	s = open(t, dir)
	if got, err := s.Secret(ctx, "k", []byte("another")); err != nil || !bytes.Equal(got, key) {
		t.Errorf("Secret(k) after reopening = %x, %v; want %x, nil", got, err, key)
	}
	for w, want := range map[string]bool{"ep1-live": true, "ep1-old": false, "ep1-never": false} {
		if got, err := s.WorkerRevoked(ctx, w); err != nil || got != want {
			t.Errorf("WorkerRevoked(%s) after reopening = %v, %v; want %v, nil", w, got, err, want)
		}
	}
}

// TestExpiredRevocationsSwept checks that a long-running store drops revocations whose tokens
// have expired, so the in-memory set stays bounded by the tokens' life.
func TestExpiredRevocationsSwept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, t.TempDir())
	s.SetRevocationSweepFloor(8)
	past, future := time.Now().Add(-time.Second), time.Now().Add(time.Hour)
	const n = 60 // past the first sweep (at 8 revocations) and the next ones
	for i := range n {
		until := past
		if i%10 == 0 {
			until = future
		}
		if err := s.RevokeWorker(ctx, "ep1-w"+strconv.Itoa(i), until); err != nil {
			t.Fatalf("RevokeWorker #%d = %v; want nil", i, err)
		}
	}
	if got := s.Revocations(); got >= 16 {
		t.Errorf("revocations held after %d, most of them expired = %d; want fewer than 16", n, got)
	}
	for i := 0; i < n; i += 10 {
		if r, _ := s.WorkerRevoked(ctx, "ep1-w"+strconv.Itoa(i)); !r {
			t.Errorf("WorkerRevoked(ep1-w%d), a revocation in force = false; want true", i)
		}
	}
}
