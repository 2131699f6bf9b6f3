package core

import (
	"context"
	"sync"
	"time"
)

// RateLimits counts requests against users' rate-limit windows: fixed minute, hour and day
// windows aligned to the Unix epoch. RateLimiter, in this process's memory, is the embedded
// default; an implementation in a shared store lets replicas count a user's requests together.
type RateLimits interface {
	// Allow counts one request of user against quota at now, unless a window is used up; a
	// refused request counts against no window. An error means the request could not be
	// counted (the shared store is unreachable): the caller must not treat it as allowed. A
	// call whose ctx is done returns an error that wraps ctx.Err() and counts nothing.
	Allow(ctx context.Context, user string, q Quota, now time.Time) (Decision, error)
}

// Window is one rate-limit window's state after a request was counted (or refused).
type Window struct {
	Name      string // "minute", "hour", "day"
	Length    int64  // seconds
	Quota     int    // requests per window
	Remaining int    // requests left in the current window
	Reset     int64  // seconds until the window resets
}

// Decision is the outcome of counting one request against a user's windows.
type Decision struct {
	Allowed bool
	// Windows lists the limited windows (quota > 0), minute first; empty = the user is exempt.
	Windows []Window
	// Exceeded names the exhausted window and RetryAfter its seconds to reset, when refused.
	Exceeded   string
	RetryAfter int64
}

var windowDefs = [3]struct {
	name   string
	length int64
}{{"minute", 60}, {"hour", 3600}, {"day", 86400}}

// RateLimiter is the in-memory RateLimits: counters live in this process, so a restart starts
// fresh windows and replicas would each count on their own. It fails only for a done context.
type RateLimiter struct {
	users sync.Map // user -> *userWindows
}

type userWindows struct {
	mu    sync.Mutex
	start [3]int64 // start of each window (Unix seconds)
	used  [3]int
}

// Allow implements RateLimits.
func (l *RateLimiter) Allow(ctx context.Context, user string, q Quota, now time.Time) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	return l.allow(user, q, now), nil
}

func (l *RateLimiter) allow(user string, q Quota, now time.Time) Decision {
	quotas := [3]int{q.Minute, q.Hour, q.Day}
	if quotas == [3]int{} {
		return Decision{Allowed: true}
	}
	v, _ := l.users.LoadOrStore(user, &userWindows{})
	u := v.(*userWindows)
	sec := now.Unix()

	u.mu.Lock()
	defer u.mu.Unlock()
	d := Decision{Allowed: true}
	for i, w := range windowDefs {
		if start := sec - sec%w.length; u.start[i] != start {
			u.start[i], u.used[i] = start, 0
		}
		// Of several exhausted windows, name the one that resets last: retrying any sooner fails.
		if reset := u.start[i] + w.length - sec; quotas[i] > 0 && u.used[i] >= quotas[i] && (d.Allowed || reset > d.RetryAfter) {
			d.Allowed = false
			d.Exceeded = w.name
			d.RetryAfter = reset
		}
	}
	for i, w := range windowDefs {
		if quotas[i] <= 0 {
			continue
		}
		if d.Allowed {
			u.used[i]++
		}
		d.Windows = append(d.Windows, Window{
			Name: w.name, Length: w.length, Quota: quotas[i],
			Remaining: max(quotas[i]-u.used[i], 0),
			Reset:     u.start[i] + w.length - sec,
		})
	}
	return d
}

var _ RateLimits = (*RateLimiter)(nil)
