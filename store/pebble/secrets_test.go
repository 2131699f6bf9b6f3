package pebble_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gantryhq/gantry/store/pebble"
)

// TestExpiredRevocationsForgottenAtOpen checks that a revocation whose tokens have expired is
// not loaded again: the in-memory set holds only revocations in force.
func TestExpiredRevocationsForgottenAtOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s, err := pebble.Open(dir)
	if err != nil {
		t.Fatalf("Open(%q) = %v; want nil", dir, err)
	}
	for w, until := range map[string]time.Time{"ep1-live": time.Now().Add(time.Hour), "ep1-old": time.Now().Add(-time.Second)} {
		if err := s.RevokeWorker(ctx, w, until); err != nil {
			t.Fatalf("RevokeWorker(%s) = %v; want nil", w, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v; want nil", err)
	}
	s = open(t, dir)
	if got := s.Revocations(); got != 1 {
		t.Errorf("revocations held after reopening = %d; want 1 (the expired one forgotten)", got)
	}
	if r, err := s.WorkerRevoked(ctx, "ep1-live"); err != nil || !r {
		t.Errorf("WorkerRevoked(ep1-live) after reopening = %v, %v; want true, nil", r, err)
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
