// Package gcfloor keeps a small heap from being collected more often than it needs.
//
// The Go collector runs when the heap has grown by GOGC percent (100) of what was live after
// the last cycle. A server with little live data (a few MiB: Gantry with nothing queued) then
// collects every few MiB it allocates, dozens of times a second under steady requests, and
// the requests that meet a collection's mark phase make the latency tail. Floor raises the
// growth allowed between cycles so that the heap may reach at least a floor before the next
// one; once the live heap is half the floor or more, GOGC applies unchanged. Memory use with a
// large live heap (a million queued jobs) is therefore the same as without it.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// Default is the heap size below which the collector is not run for growth alone (bytes).
const Default = 64 << 20

// Start keeps the heap goal at least floor bytes, until the returned stop is called: after
// each collection it sets the GC percentage from the live heap. It does nothing (stop is a
// no-op) when GOGC is set in the environment, which then decides alone, or when floor <= 0.
func Start(floor int64) (stop func()) {
	if floor <= 0 || os.Getenv("GOGC") != "" {
		return func() {}
	}
	t := &tuner{floor: floor, base: debug.SetGCPercent(100)}
	debug.SetGCPercent(t.base)
	t.sample = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	t.arm()
	return func() {
		if t.stopped.CompareAndSwap(false, true) {
			debug.SetGCPercent(t.base)
		}
	}
}

type tuner struct {
	floor   int64
	base    int // the GC percentage in force before Start
	set     int // the percentage last set; 0 = none yet
	sample  []metrics.Sample
	stopped atomic.Bool
}

// sentinel is an object whose finalizer runs after the collection that finds it unreachable:
// once per cycle, as each one arms the next.
type sentinel struct{ t *tuner }

func (t *tuner) arm() {
	runtime.SetFinalizer(&sentinel{t}, func(s *sentinel) {
		if s.t.stopped.Load() {
			return
		}
		s.t.adjust()
		s.t.arm()
	})
}

// adjust sets the GC percentage for the live heap the last cycle left. A change of less than a
// tenth is not made: the live heap moves a little every cycle.
func (t *tuner) adjust() {
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	pct := Percent(int64(t.sample[0].Value.Uint64()), t.floor, t.base)
	if worthSetting(t.set, pct, t.base) && !t.stopped.Load() {
		t.set = pct
		debug.SetGCPercent(pct)
	}
}

// worthSetting reports whether next should replace the percentage in force, cur: when it
// returns to base, or differs from cur by more than a tenth.
func worthSetting(cur, next, base int) bool {
	switch {
	case next == cur:
		return false
	case next == base:
		return true
	}
	d := next - cur
	return d > cur/10 || -d > cur/10
}

// Percent returns the GC percentage that lets a heap with live bytes grow to floor before the
// next collection, and never less than base (GOGC). A live heap under 1 MiB counts as 1 MiB.
func Percent(live, floor int64, base int) int {
	if base <= 0 || live >= floor/2 {
		return base
	}
	live = max(live, 1<<20)
	return max(int((floor-live)*100/live), base)
}
