package startstop

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

func TestGroupStopWaitsForEveryGoroutine(t *testing.T) {
	t.Parallel()
	var g Group
	if _, err := g.Begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	var ended atomic.Int32
	for range 4 {
		if !g.Go(func(ctx context.Context) { <-ctx.Done(); ended.Add(1) }) {
			t.Fatal("Go refused work on a started group")
		}
	}
	g.Stop()
	if n := ended.Load(); n != 4 {
		t.Fatalf("after Stop, %d of 4 goroutines had returned", n)
	}
	if g.Go(func(context.Context) {}) {
		t.Error("Go ran work on a stopped group")
	}
	g.Stop() // a second Stop does nothing
}

func TestGroupRefusesASecondStart(t *testing.T) {
	t.Parallel()
	var g Group
	defer g.Stop()
	if _, err := g.Begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Begin(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Begin: %v, want ErrStarted", err)
	}
}

func TestGroupEndsWithItsParent(t *testing.T) {
	t.Parallel()
	var g Group
	parent, cancel := context.WithCancel(context.Background())
	ctx, err := g.Begin(parent)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-ctx.Done()
	if g.Go(func(context.Context) {}) {
		t.Error("Go ran work after the parent context ended")
	}
	g.Stop()
}
