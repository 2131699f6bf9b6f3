package testkit

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestClockStandsStillUntilMoved(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewClock(t0)
	time.Sleep(time.Millisecond)
	if got := c.Now(); !got.Equal(t0) {
		t.Errorf("Now() = %v; want %v", got, t0)
	}
	if got := c.Advance(time.Second); !got.Equal(t0.Add(time.Second)) || !c.Now().Equal(got) {
		t.Errorf("Advance(1s) = %v, then Now() = %v; want %v for both", got, c.Now(), t0.Add(time.Second))
	}
	c.Set(t0)
	if got := c.Now(); !got.Equal(t0) {
		t.Errorf("after Set, Now() = %v; want %v", got, t0)
	}
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	start := time.Now()
	Eventually(t, "the third call", func() bool { return calls.Add(1) == 3 })
	if n := calls.Load(); n != 3 {
		t.Errorf("cond called %d times; want 3", n)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v for a condition true at the third poll; want a few ms", d)
	}
}

// fatalTB records Fatalf instead of ending the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = format
}

func TestEventuallyFailsAfterItsTimeout(t *testing.T) {
	t.Parallel()
	tb := &fatalTB{TB: t}
	start := time.Now()
	calls := 0
	EventuallyWithin(tb, 50*time.Millisecond, "never", func() bool { calls++; return tb.msg != "" })
	if tb.msg == "" {
		t.Fatal("EventuallyWithin of a condition never true did not fail")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("failed after %v; want at least the 50ms timeout", d)
	}
	if calls > 50 {
		t.Errorf("cond called %d times in 50ms; want the polls spaced out", calls)
	}
}
