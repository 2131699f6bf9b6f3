package scheduler

import (
	"fmt"
	"math"
	"time"

	"github.com/gantryhq/gantry/core"
)

// Autoscaler windows (notes/autoscaling.md): one sample per tick.
const (
	StableWindow = 60 // ticks (seconds at the default 1 s tick); Config.StableWindow changes it
	PanicWindow  = 6  // ticks; Config.PanicWindow changes it
	// PanicFactor: the panic window wanting this many times the ready workers starts panic
	// mode (scale up only), which lasts until a whole stable window passes without it.
	PanicFactor = 2
	// ScaleUpFactor and ScaleUpStep cap one tick's scale-up at
	// max(active*ScaleUpFactor, active+ScaleUpStep) workers.
	ScaleUpFactor = 10
	ScaleUpStep   = 4
	// DefaultServiceTime is assumed for QUEUE_DELAY predictions until a job has finished.
	DefaultServiceTime = time.Second
)

// window is the moving average of the last len(buf) samples (fewer while it fills up).
type window struct {
	buf    []float64
	next   int
	filled int
	sum    float64
}

func newWindow(n int) window { return window{buf: make([]float64, n)} }

func (w *window) add(v float64) {
	if w.filled == len(w.buf) {
		w.sum -= w.buf[w.next]
	} else {
		w.filled++
	}
	w.buf[w.next] = v
	w.sum += v
	if w.next++; w.next == len(w.buf) {
		w.next = 0
	}
}

// addZeros adds n zero samples.
func (w *window) addZeros(n int) {
	if n < len(w.buf) {
		for range n {
			w.add(0)
		}
		return
	}
	clear(w.buf)
	w.next, w.filled, w.sum = 0, len(w.buf), 0
}

// rate is the sum over the whole window's span, per sample: a young window does not read a
// single burst as a steady rate.
func (w *window) rate() float64 { return w.sum / float64(len(w.buf)) }

func (w *window) avg() float64 {
	if w.filled == 0 {
		return 0
	}
	return w.sum / float64(w.filled)
}

// signals is one endpoint's load at a tick.
type signals struct {
	Queued     int64         // queued jobs that may scale up (lowPriority ones excluded)
	InProgress int64         // running jobs
	OldestWait time.Duration // wait of the oldest queued job that may scale up
	Arrivals   float64       // jobs entering the queue since the last tick
	Ready      int           // workers that poll for jobs
	Booting    int           // workers started but not polling yet
}

// scaler is an endpoint's autoscaling state: its windows and whether it panics.
type scaler struct {
	// First what a tick reads to pass a quiet endpoint by (epState keeps them together).
	lastSubmitted, lastExecN int64
	skipped                  int // ticks skipped while idle: zero samples owed to the windows

	stable, panic window // REQUEST_COUNT: Q+R; QUEUE_DELAY: arrivals per tick
	panicking     bool
	panicTicks    int           // ticks since panic was last justified
	service       time.Duration // EWMA of a job's execution time; 0 = none seen yet
	lastExecMs    int64
}

// catchUp adds the zero samples of the ticks skipped while the endpoint was idle.
func (s *scaler) catchUp() {
	if s.skipped == 0 {
		return
	}
	s.stable.addZeros(s.skipped)
	s.panic.addZeros(s.skipped)
	if s.panicking { // as s.skipped calls of updatePanic(false)
		if s.panicTicks += s.skipped; s.panicTicks >= len(s.stable.buf) {
			s.panicking = false
		}
	}
	s.skipped = 0
}

func newScaler(stable, panic int) scaler {
	return scaler{stable: newWindow(stable), panic: newWindow(panic)}
}

// observeService folds the execution times of jobs ended since the last tick into the EWMA.
func (s *scaler) observeService(l core.Load) {
	dn, dms := l.ExecCount-s.lastExecN, l.ExecMs-s.lastExecMs
	s.lastExecN, s.lastExecMs = l.ExecCount, l.ExecMs
	if dn <= 0 {
		return
	}
	mean := time.Duration(dms/dn) * time.Millisecond
	if s.service == 0 {
		s.service = mean
	} else {
		s.service = (4*s.service + mean) / 5
	}
}

// desired returns how many workers the endpoint wants before min/max and rate bounds, and why.
// hold=true means "keep what runs" (QUEUE_DELAY with no delay to fix): scale-down is then left
// to the idle timers.
func (s *scaler) desired(sc core.Scaling, sig signals) (want int, hold bool, reason why) {
	active := sig.Ready + sig.Booting
	switch sc.Type {
	case core.ScaleRequestCount:
		rc := float64(max(sc.RequestCount, 1))
		load := float64(sig.Queued + sig.InProgress)
		s.stable.add(load)
		s.panic.add(load)
		stableWant := int(math.Ceil(s.stable.avg() / rc))
		panicWant := int(math.Ceil(s.panic.avg() / rc))
		s.updatePanic(panicWant >= PanicFactor*max(sig.Ready, 1) && panicWant > active)
		want, reason = stableWant, why{kind: whyCount, avg: s.stable.avg(), n: s.stable.filled, per: sc.RequestCount}
		if s.panicking {
			want = max(stableWant, panicWant, active) // panic mode only scales up
			reason = why{kind: whyCountPanic, avg: s.panic.avg(), n: s.panic.filled, per: sc.RequestCount}
		}
		return want, false, reason
	default: // QUEUE_DELAY
		s.stable.add(sig.Arrivals)
		s.panic.add(sig.Arrivals)
		limit := time.Duration(sc.QueueDelay * float64(time.Second))
		svc := s.service
		if svc == 0 {
			svc = DefaultServiceTime
		}
		drain := time.Duration(math.MaxInt64)
		if sig.Ready > 0 {
			drain = time.Duration(sig.Queued) * svc / time.Duration(sig.Ready)
		}
		late := sig.OldestWait > limit
		s.updatePanic(sig.Queued > 0 && sig.OldestWait > PanicFactor*limit)
		if sig.Queued == 0 || (!late && drain <= limit) {
			return active, true, why{}
		}
		rate := s.stable.rate() // arrivals per tick (per second at the default tick)
		if s.panicking {
			rate = max(rate, s.panic.rate())
		}
		// Little's law: rate*svc workers keep up with arrivals; Q*svc/limit more drain the
		// backlog within queueDelay.
		need := rate*svc.Seconds() + float64(sig.Queued)*svc.Seconds()/max(limit.Seconds(), 0.001)
		want = int(math.Ceil(need))
		if late && sig.Booting == 0 {
			// A job waits too long: add one at least, whatever the estimate; a booting worker
			// is that one already.
			want = max(want, active+1)
		}
		if sig.Ready > 0 && drain > limit {
			reason = why{kind: whyDrain, queued: sig.Queued, d: drain, ready: sig.Ready, delay: sc.QueueDelay}
		} else {
			reason = why{kind: whyWait, d: sig.OldestWait, delay: sc.QueueDelay}
		}
		return want, false, reason
	}
}

// updatePanic enters panic mode when now is true, and leaves it after a whole stable window
// in which it never was.
func (s *scaler) updatePanic(now bool) {
	switch {
	case now:
		s.panicking, s.panicTicks = true, 0
	case s.panicking:
		if s.panicTicks++; s.panicTicks >= len(s.stable.buf) {
			s.panicking = false
		}
	}
}

// bound clamps want to [min, max] and caps one tick's scale-up.
func bound(want, active int, w core.Workers) int {
	if want > active {
		want = min(want, max(active*ScaleUpFactor, active+ScaleUpStep))
	}
	return min(max(want, w.Min), w.Max)
}

// why is a scaling decision's reason, formatted only when it is logged: building the text for
// every endpoint on every tick would cost more than the decision.
type why struct {
	kind   uint8
	avg    float64
	n, per int
	queued int64
	d      time.Duration
	ready  int
	delay  float64
	text   string
}

// Kinds of why.
const (
	whyNone uint8 = iota
	whyCount
	whyCountPanic
	whyDrain
	whyWait
	whyText
)

func (w why) String() string {
	switch w.kind {
	case whyCount:
		return fmt.Sprintf("REQUEST_COUNT: %.1f jobs queued or running on average over %ds, %d per worker", w.avg, w.n, w.per)
	case whyCountPanic:
		return fmt.Sprintf("REQUEST_COUNT panic: %.1f jobs queued or running on average over %ds, %d per worker", w.avg, w.n, w.per)
	case whyDrain:
		return fmt.Sprintf("QUEUE_DELAY: %d queued would take %s to drain with %d workers, over %gs", w.queued, w.d.Round(time.Millisecond), w.ready, w.delay)
	case whyWait:
		return fmt.Sprintf("QUEUE_DELAY: the oldest job has waited %s, over %gs", w.d.Round(time.Millisecond), w.delay)
	case whyText:
		return w.text
	}
	return ""
}
