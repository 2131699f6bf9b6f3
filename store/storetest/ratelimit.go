package storetest

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// rlDay is a Unix-epoch-aligned day (UTC midnight); rlAt is 10m15s into it, so the minute resets
// in 45s, the hour in 2985s and the day in 85785s.
var (
	rlDay = time.Date(2025, time.June, 1, 0, 0, 0, 0, time.UTC)
	rlAt  = rlDay.Add(10*time.Minute + 15*time.Second)
)

// RunRateLimits runs the conformance suite against a core.RateLimits: fixed minute, hour and
// day windows aligned to the Unix epoch, counted per user; refusals that count nothing; the
// reset and Retry-After of each window; exact counting under concurrency; a done context.
// Windows need not survive a restart (the in-memory limiter's do not): the suite never reopens.
func RunRateLimits(t *testing.T, opener Opener[core.RateLimits]) {
	t.Helper()
	open := func(t *testing.T) core.RateLimits { l, _ := opener(t); return l }
	// allow counts one request, failing the test on an error.
	allow := func(t *testing.T, l core.RateLimits, user string, q core.Quota, now time.Time) core.Decision {
		t.Helper()
		d, err := l.Allow(context.Background(), user, q, now)
		if err != nil {
			t.Fatalf("Allow(%q, %+v, %v) = %v; want nil", user, q, now, err)
		}
		return d
	}

	t.Run("CountsDown", func(t *testing.T) {
		t.Parallel()
		l := open(t)
		q := core.Quota{Minute: 3}
		for i, remaining := range []int{2, 1, 0} {
			got := allow(t, l, "alice", q, rlAt)
			want := core.Decision{Allowed: true, Windows: []core.Window{
				{Name: "minute", Length: 60, Quota: 3, Remaining: remaining, Reset: 45},
			}}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Allow #%d = %+v; want %+v", i+1, got, want)
			}
		}
		got := allow(t, l, "alice", q, rlAt.Add(5*time.Second))
		want := core.Decision{
			Windows:  []core.Window{{Name: "minute", Length: 60, Quota: 3, Remaining: 0, Reset: 40}},
			Exceeded: "minute", RetryAfter: 40,
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Allow #4 = %+v; want %+v", got, want)
		}
	})

	t.Run("AllWindows", func(t *testing.T) {
		t.Parallel()
		l := open(t)
		got := allow(t, l, "alice", core.Quota{Minute: 10, Hour: 100, Day: 1000}, rlAt)
		want := core.Decision{Allowed: true, Windows: []core.Window{
			{Name: "minute", Length: 60, Quota: 10, Remaining: 9, Reset: 45},
			{Name: "hour", Length: 3600, Quota: 100, Remaining: 99, Reset: 2985},
			{Name: "day", Length: 86400, Quota: 1000, Remaining: 999, Reset: 85785},
		}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Allow = %+v; want %+v", got, want)
		}
	})

	t.Run("Exceeded", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name           string
			quota          core.Quota
			allowed        int // requests allowed before the refusal
			wantExceeded   string
			wantRetryAfter int64
		}{
			{"minute runs out", core.Quota{Minute: 2, Hour: 10, Day: 100}, 2, "minute", 45},
			{"hour smaller than minute", core.Quota{Minute: 10, Hour: 3}, 3, "hour", 2985},
			{"day smaller than both", core.Quota{Minute: 10, Hour: 10, Day: 4}, 4, "day", 85785},
			{"only the hour", core.Quota{Hour: 1}, 1, "hour", 2985},
			{"minute and hour both out: the later reset wins", core.Quota{Minute: 2, Hour: 2}, 2, "hour", 2985},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				l := open(t)
				for i := range tt.allowed {
					if d := allow(t, l, "alice", tt.quota, rlAt); !d.Allowed {
						t.Fatalf("Allow #%d with %+v = %+v; want allowed", i+1, tt.quota, d)
					}
				}
				d := allow(t, l, "alice", tt.quota, rlAt)
				if d.Allowed || d.Exceeded != tt.wantExceeded || d.RetryAfter != tt.wantRetryAfter {
					t.Errorf("Allow #%d with %+v = allowed %v, exceeded %q, retry after %d; want refused, %q, %d",
						tt.allowed+1, tt.quota, d.Allowed, d.Exceeded, d.RetryAfter, tt.wantExceeded, tt.wantRetryAfter)
				}
				for _, w := range d.Windows {
					if w.Name == tt.wantExceeded && w.Remaining != 0 {
						t.Errorf("refused Allow: window %s remaining = %d; want 0", w.Name, w.Remaining)
					}
				}
			})
		}
	})

	t.Run("RefusalConsumesNothing", func(t *testing.T) {
		t.Parallel()
		l := open(t)
		q := core.Quota{Minute: 2, Hour: 5}
		remaining := func(d core.Decision) [2]int { return [2]int{d.Windows[0].Remaining, d.Windows[1].Remaining} }
		allow(t, l, "alice", q, rlAt)
		allow(t, l, "alice", q, rlAt)
		for i := range 3 { // three refusals in the exhausted minute
			d := allow(t, l, "alice", q, rlAt)
			if d.Allowed || remaining(d) != [2]int{0, 3} {
				t.Fatalf("refused Allow #%d = allowed %v, remaining %v; want refused, [0 3]", i+1, d.Allowed, remaining(d))
			}
		}
		// Next minute: the hour has 3 left, not 0.
		next := rlAt.Add(time.Minute)
		for i, want := range [][2]int{{1, 2}, {0, 1}} {
			d := allow(t, l, "alice", q, next)
			if !d.Allowed || remaining(d) != want {
				t.Errorf("Allow #%d in the next minute = allowed %v, remaining %v; want allowed, %v", i+1, d.Allowed, remaining(d), want)
			}
		}
	})

	t.Run("EpochAlignedReset", func(t *testing.T) {
		t.Parallel()
		l := open(t)
		q := core.Quota{Minute: 1}
		minute := rlDay.Add(7 * time.Minute) // an aligned minute
		steps := []struct {
			offset         time.Duration
			wantAllowed    bool
			wantReset      int64
			wantRetryAfter int64
		}{
			{59 * time.Second, true, 1, 0},                        // the minute's last second
			{59*time.Second + 999*time.Millisecond, false, 1, 1},  // still the same minute
			{60 * time.Second, true, 60, 0},                       // one second after the first request: a new minute
			{61 * time.Second, false, 59, 59},                     //
			{119*time.Second + 999*time.Millisecond, false, 1, 1}, //
			{120 * time.Second, true, 60, 0},                      //
		}
		for _, s := range steps {
			d := allow(t, l, "alice", q, minute.Add(s.offset))
			if d.Allowed != s.wantAllowed || d.Windows[0].Reset != s.wantReset || d.RetryAfter != s.wantRetryAfter {
				t.Errorf("Allow(minute+%v) = allowed %v, reset %d, retry after %d; want %v, %d, %d",
					s.offset, d.Allowed, d.Windows[0].Reset, d.RetryAfter, s.wantAllowed, s.wantReset, s.wantRetryAfter)
			}
		}
	})

	t.Run("Exempt", func(t *testing.T) {
		t.Parallel()
		l := open(t)
		for i := range 1000 {
			if d := allow(t, l, "alice", core.Quota{}, rlAt); !reflect.DeepEqual(d, core.Decision{Allowed: true}) {
				t.Fatalf("Allow #%d with a zero quota = %+v; want {Allowed:true} and no windows", i+1, d)
			}
		}
	})

	t.Run("ZeroWindowOmitted", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			quota core.Quota
			want  []string
		}{
			{core.Quota{Hour: 5}, []string{"hour"}},
			{core.Quota{Minute: 5, Day: 50}, []string{"minute", "day"}},
			{core.Quota{Day: 1}, []string{"day"}},
			{core.Quota{Minute: 1, Hour: 2}, []string{"minute", "hour"}},
		}
		for _, tt := range tests {
			l := open(t)
			var got []string
			for _, w := range allow(t, l, "alice", tt.quota, rlAt).Windows {
				got = append(got, w.Name)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Allow with %+v windows = %v; want %v", tt.quota, got, tt.want)
			}
		}
		// A zero minute quota is unlimited per minute: the hour alone limits.
		l := open(t)
		for i := range 5 {
			if d := allow(t, l, "alice", core.Quota{Hour: 5}, rlAt); !d.Allowed {
				t.Fatalf("Allow #%d with {Hour:5} = %+v; want allowed", i+1, d)
			}
		}
		if d := allow(t, l, "alice", core.Quota{Hour: 5}, rlAt); d.Allowed || d.Exceeded != "hour" {
			t.Errorf("Allow #6 with {Hour:5} = %+v; want refused on the hour", d)
		}
	})

	t.Run("UsersIndependent", func(t *testing.T) {
		t.Parallel()
		l := open(t)
		q := core.Quota{Minute: 1}
		if d := allow(t, l, "alice", q, rlAt); !d.Allowed {
			t.Fatalf("Allow(alice) #1 = %+v; want allowed", d)
		}
		if d := allow(t, l, "alice", q, rlAt); d.Allowed {
			t.Fatalf("Allow(alice) #2 = %+v; want refused", d)
		}
		for _, user := range []string{"bob", "alice2", "Alice", ""} {
			if d := allow(t, l, user, q, rlAt); !d.Allowed || d.Windows[0].Remaining != 0 {
				t.Errorf("Allow(%q) after alice ran out = %+v; want allowed with 0 remaining", user, d)
			}
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		const goroutines, calls, quota = 64, 100, 1000
		l := open(t)
		var (
			allowed atomic.Int64
			wg      sync.WaitGroup
		)
		q := core.Quota{Minute: quota}
		start := make(chan struct{}) // released rlAt once, for the most contention
		for range goroutines {
			wg.Go(func() {
				<-start
				for range calls {
					d, err := l.Allow(context.Background(), "alice", q, rlAt)
					if err != nil {
						t.Errorf("Allow(alice) = %v; want nil", err)
						return
					}
					if d.Allowed {
						allowed.Add(1)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if got := allowed.Load(); got != quota {
			t.Errorf("%d goroutines x %d calls with quota %d/min allowed %d; want %d", goroutines, calls, quota, got, quota)
		}
	})

	t.Run("DoneContext", func(t *testing.T) {
		t.Parallel()
		l := open(t)
		q := core.Quota{Minute: 1}
		for _, dc := range doneContexts(t) {
			if _, err := l.Allow(dc.ctx, "alice", q, rlAt); !errors.Is(err, dc.want) {
				t.Errorf("Allow(%s) = %v; want %v", dc.name, err, dc.want)
			}
		}
		if d := allow(t, l, "alice", q, rlAt); !d.Allowed {
			t.Errorf("Allow after done calls = %+v; want allowed: they counted nothing", d)
		}
	})
}
