// Package testkit is what Gantry's tests share instead of copying: a fake clock, an
// eventually-style wait, and a goroutine leak check for TestMain. Test files import it;
// nothing else may.
package testkit

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Clock is a clock that stands still until the test sets or advances it; it is a core.Clock.
// It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock stopped at now.
func NewClock(now time.Time) *Clock { return &Clock{now: now} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock on by d and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// WaitTimeout is how long Eventually waits: what takes milliseconds alone can take seconds on
// a small machine running many test binaries at once.
const WaitTimeout = 30 * time.Second

// Eventually polls cond until it holds, and fails the test (from its goroutine only) when it
// does not within WaitTimeout. It polls at once, then every 1 ms, doubling up to every 20 ms,
// so that a condition soon true is seen soon and a slow one (a container starting) is not
// asked about in a busy loop.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	EventuallyWithin(tb, WaitTimeout, what, cond)
}

// EventuallyWithin is Eventually with its own timeout.
func EventuallyWithin(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("waited %v for: %s", timeout, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// VerifyNoLeaks runs a package's tests (call it from TestMain) and, when they pass, fails the
// run if goroutines they started are still running a few seconds later: a server, poller or
// pool call that Close did not end. Connections idle in http.DefaultTransport's pool are
// closed first; they are a cache, not a leak.
func VerifyNoLeaks(m *testing.M, ignore ...goleak.Option) {
	goleak.VerifyTestMain(runThenCloseIdle{m}, ignore...)
}

type runThenCloseIdle struct{ m *testing.M }

func (r runThenCloseIdle) Run() int {
	code := r.m.Run()
	http.DefaultClient.CloseIdleConnections()
	return code
}
