package scheduler

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/core"
)

// This file is the autoscaler's tick: the fan-out over every endpoint, and the per-endpoint
// decision (scale up, scale down, pass a quiet endpoint by); Demand is its shortcut for the
// first job on an endpoint scaled to zero.

// tickChunk is how many endpoints one goroutine of a Tick takes at a time.
const tickChunk = 256

// maxBusyTicks is how many ticks in a row may pass an endpoint by because its lock was held;
// the next one waits for the lock.
const maxBusyTicks = 2

// Tick runs one autoscaler pass over every endpoint at now. Endpoints are independent (each
// has its own lock), so GOMAXPROCS goroutines share them, a chunk at a time.
func (s *Scheduler) Tick(now time.Time) {
	s.tryApplySignals() // the workers ready and lost so far, so that few decisions miss them
	s.checkReplicas()   // the workers of a replica that left stop, to be replaced
	p := s.list.Load()
	if p == nil {
		return
	}
	eps := *p
	if len(eps) == 0 {
		return
	}
	// The endpoints are taken in chunks by this goroutine and GOMAXPROCS-1 helpers. Tick waits
	// for the chunks being ticked, not for the helpers: on busy CPUs a helper may start only
	// after this goroutine has done every chunk, and then it finds nothing to do.
	var next, ticked atomic.Int64
	all := int64(len(eps))
	done := make(chan struct{})
	work := func() {
		var sc scratch
		var busy []*epState
		for {
			end := next.Add(tickChunk)
			start := end - tickChunk
			if start >= all {
				return
			}
			end = min(end, all)
			busy = busy[:0]
			for _, es := range eps[start:end] {
				if !s.tick(es, now, &sc) {
					busy = append(busy, es)
				}
			}
			for _, es := range busy { // a second try after the chunk; then at the next tick
				if !s.tick(es, now, &sc) {
					es.busyTicks.Add(1)
				}
			}
			if ticked.Add(end-start) == all {
				close(done)
			}
		}
	}
	for range min(runtime.GOMAXPROCS(0), int(all+tickChunk-1)/tickChunk) - 1 {
		go work()
	}
	work()
	<-done
}

// scratch is the buffers one Tick reuses across endpoints.
type scratch struct {
	idle    []idleWorker
	booting []*workerRec
}

// tick is one autoscaler pass over one endpoint. An endpoint whose lock is held (a worker
// starting or stopping, a job arriving at an endpoint with no worker) is passed by, and tick
// returns false, unless it was passed by in the last maxBusyTicks ticks: the holder may be a
// goroutine waiting for a CPU, and the tick does not wait with it (its other endpoints would).
func (s *Scheduler) tick(es *epState, now time.Time, sc *scratch) bool {
	if s.tickWaits || es.busyTicks.Load() >= maxBusyTicks {
		es.mu.Lock()
	} else if !es.mu.TryLock() {
		return false
	}
	defer es.mu.Unlock()
	es.busyTicks.Store(0)
	if es.deleted {
		return true
	}
	var load core.Load
	if es.queueType {
		load = es.load.Load(es.queueDelay) // REQUEST_COUNT counts jobs, not their wait
		// Fast path: a quiet endpoint (see quietUntil) that is still calm, with no job
		// submitted or ended since, has nothing to decide; the windows get the skipped ticks'
		// zero samples when it has (catchUp).
		if es.calm(load) && load.Submitted == es.scaler.lastSubmitted && load.ExecCount == es.scaler.lastExecN &&
			es.quietAt == es.changes && now.Before(es.quietUntil) {
			es.scaler.skipped++
			return true
		}
	}
	es.scaler.catchUp()
	changes := es.changes
	ep := &es.ep

	// Survey the workers: promote, recycle and time out; collect the idle ones.
	idle, booting := sc.idle[:0], sc.booting[:0]
	defer func() { sc.idle, sc.booting = idle[:0], booting[:0] }()
	ready := 0
	workers := es.workers
	if es.active.Load() == 0 {
		workers = nil // none booting or ready: nothing below to read in the others
	}
	for _, w := range workers {
		switch w.state {
		case phaseBooting:
			if w.lb == nil {
				// A worker that polled (or took a job) is ready, whether or not its ready
				// signal was applied yet: the engine's activity mirror says so without a lock,
				// and the signal, applied by another goroutine that under load waits for a
				// CPU, would come a tick or more late, and meanwhile the endpoint would look
				// short of ready workers (the autoscaler would start more). A resumed worker's
				// mirror still shows its polls before the suspension until the engine resumes
				// it, so it waits for its signal.
				if polled, busy := w.act.Started(); busy || (polled && !w.resumed) {
					at := now
					if st := w.act.Status(); !st.IdleSince.IsZero() && st.IdleSince.Before(now) {
						at = st.IdleSince // its first poll
					}
					s.readyLocked(w, at)
					ready++
					continue
				}
			}
			if w.waiting == "" && now.Sub(w.startedAt) > s.cfg.InitTimeout { // a waiting worker is throttled, not failing
				what := "poll for a job"
				if w.lb != nil {
					what = "pass its health check"
				}
				s.fail(es, now, fmt.Sprintf("worker %s did not %s within %s of its start", w.id, what, s.cfg.InitTimeout))
				w.failed = true
				s.stopLocked(w, "init timeout")
				s.metrics.decision(ep.ID, "down", "init_timeout")
				continue
			}
			booting = append(booting, w)
		case phaseReady:
			busy, idleFor, stopPod, ok := s.activity(w, now)
			if !ok {
				continue
			}
			if !busy && (stopPod || w.gen != es.gen) {
				why := "its last job asked for stopPod"
				if w.gen != es.gen {
					why = "the endpoint's image, env or GPU settings changed"
				}
				s.retireLocked(w, why, false)
				continue
			}
			ready++
			if !busy {
				idle = append(idle, idleWorker{w, idleFor})
			}
		}
	}

	var sig signals
	if es.queueType {
		sig = signals{Queued: load.Queued, InProgress: load.InProgress, Arrivals: float64(load.Submitted - es.scaler.lastSubmitted)}
		es.scaler.lastSubmitted = load.Submitted
		es.scaler.observeService(load)
		if load.Queued > 0 && es.queueDelay { // REQUEST_COUNT counts jobs, not their wait
			sig.OldestWait = oldestWait(load, now)
		}
	} else {
		// LOAD_BALANCER: requests waiting for a worker and requests in flight (spec 2.4: these
		// scale on REQUEST_COUNT).
		sig.Queued, sig.InProgress = es.lbWaiting.Load(), es.inflight()
		load.Queued = sig.Queued
	}
	sig.Ready, sig.Booting = ready, len(booting)
	active := ready + len(booting)
	want, hold, reason := es.scaler.desired(ep.Scaling, sig)
	if sig.Queued > 0 && active == 0 {
		want, hold, reason = max(want, 1), false, why{kind: whyText, text: "scale from zero: work is waiting"}
	}
	if hold {
		want = active
	}
	target := bound(want, active, ep.Workers)
	es.throttled, es.noRoom = 0, nil

	switch {
	case target > active:
		if s.backingOff(es, now) {
			break
		}
		code := "request_count"
		switch {
		case active == 0 && sig.Queued > 0:
			code = "scale_from_zero"
		case want <= ep.Workers.Min:
			code = "min"
		case ep.Scaling.Type == core.ScaleQueueDelay:
			code = "queue_delay"
		case es.scaler.panicking:
			code = "panic"
		}
		started := 0
		for range target - active {
			if err := s.startLocked(es, now, code); err != nil {
				break
			}
			started++
		}
		if started > 0 {
			s.cfg.Log.Info("scaling up", "endpoint", ep.ID, "from", active, "to", active+started, "reason", cmp.Or(reason.String(), "workers.min"))
		}
	default:
		s.scaleDown(es, active, target, hold, load.Queued+load.LowQueued > 0, booting, idle)
	}
	es.quietUntil = time.Time{}
	if es.queueType && es.changes == changes && es.calm(load) && len(booting) == 0 && len(idle) == ready {
		es.quietAt, es.quietUntil = changes, s.quietUntil(es, now, active, idle)
	}
	s.publish(es)
	return true
}

// oldestWait is how long the oldest queued job that may scale the endpoint up has waited
// (lowPriority ones are passed over).
func oldestWait(load core.Load, now time.Time) time.Duration {
	if load.OldestQueuedAt.IsZero() {
		return 0
	}
	return max(now.Sub(load.OldestQueuedAt), 0)
}

// calm says that nothing is queued or running on the endpoint and its workers are not failing
// or waiting for capacity.
func (es *epState) calm(load core.Load) bool {
	return es.failures == 0 && es.throttled == 0 && load.Queued == 0 && load.LowQueued == 0 && load.InProgress == 0
}

// never is later than any tick.
var never = time.Unix(1<<62, 0)

// maxQuiet bounds how long ticks pass a quiet endpoint that has workers by.
const maxQuiet = 10 * time.Second

// quietUntil is until when ticks may pass a quiet endpoint by: with no worker and none wanted,
// for good (only a job or a change ends that); else until its first idle worker is due to
// retire (its idle grace ends), or maxQuiet from now when none can (workers.min of them run).
func (s *Scheduler) quietUntil(es *epState, now time.Time, active int, idle []idleWorker) time.Time {
	if len(es.workers) == 0 && es.ep.Workers.Min == 0 {
		return never
	}
	until := now.Add(maxQuiet)
	if active > es.ep.Workers.Min {
		grace := idleGrace(&es.ep)
		for _, iw := range idle {
			if t := now.Add(grace - iw.idle); t.Before(until) {
				until = t
			}
		}
	}
	return until
}

// idleGrace is how long a worker of ep stays idle before it may retire.
func idleGrace(ep *core.Endpoint) time.Duration {
	if ep.IdleTimeoutApplies() {
		return time.Duration(ep.Workers.IdleTimeout) * time.Second
	}
	return RequestCountIdleGrace
}

type idleWorker struct {
	w    *workerRec
	idle time.Duration
}

// scaleDown retires workers beyond the target: booting ones first (they hold nothing, and only
// while no job waits), then idle ones once idle past the endpoint's idle timeout: those on the
// pools the endpoint lists last first, then the longest idle. A worker holding a job is never
// retired. With hold (QUEUE_DELAY with no delay to fix) the idle timers alone retire workers
// down to workers.min. Workers beyond workers.max (lowered by PATCH) go without waiting for the
// idle timeout.
//
// The pool order matters for the workers that stay: an endpoint that scaled out onto the pools
// it prefers less keeps its workers.min workers on the pools it prefers, and hands the others'
// capacity back to the endpoints that prefer those.
func (s *Scheduler) scaleDown(es *epState, active, target int, hold, queued bool, booting []*workerRec, idle []idleWorker) {
	ep := &es.ep
	excess := active - target
	if hold {
		excess = active - ep.Workers.Min
	}
	over := active - ep.Workers.Max
	if excess <= 0 && over <= 0 {
		return
	}
	if !hold || over > 0 {
		for i := len(booting) - 1; i >= 0 && excess > 0 && (!queued || over > 0); i-- {
			s.stopLocked(booting[i], "scale-down: not needed any more")
			s.metrics.decision(ep.ID, "down", "booting_not_needed")
			excess--
			over--
		}
	}
	grace := idleGrace(ep)
	slices.SortFunc(idle, func(a, b idleWorker) int {
		if c := cmp.Compare(poolRank(ep, b.w), poolRank(ep, a.w)); c != 0 {
			return c
		}
		return cmp.Compare(b.idle, a.idle)
	})
	for _, iw := range idle {
		if (excess <= 0 || queued) && over <= 0 {
			break // an idle worker takes queued jobs as soon as it polls
		}
		if iw.idle < grace && over <= 0 {
			continue
		}
		why := fmt.Sprintf("idle for %s (idle timeout %s)", iw.idle.Round(time.Millisecond), grace)
		if over > 0 {
			why = fmt.Sprintf("over workers.max %d", ep.Workers.Max)
		}
		s.retireLocked(iw.w, why, over <= 0)
		s.metrics.decision(ep.ID, "down", "idle")
		excess--
		over--
	}
}

// poolRank is where the worker's pool comes in the endpoint's list of pools (0 = the one it
// prefers); a pool no longer listed (PATCH) comes after all of them.
func poolRank(ep *core.Endpoint, w *workerRec) int {
	if i := slices.Index(ep.GPU.Pools, w.res.PoolID()); i >= 0 {
		return i
	}
	return len(ep.GPU.Pools)
}

// Demand starts a worker at once when a job that may scale up is queued on an endpoint with
// no worker: the first job on a scaled-to-zero endpoint skips the autoscaler's windows. It is
// called for every enqueued job, so it costs an atomic load when workers exist.
func (s *Scheduler) Demand(endpoint string) {
	v, ok := s.eps.Load(endpoint)
	if !ok {
		return
	}
	es := v.(*epState)
	if es.active.Load() > 0 || s.closed.Load() {
		return
	}
	if es.load.Load(false).Queued == 0 {
		return // lowPriority jobs do not scale up
	}
	es.mu.Lock()
	defer es.mu.Unlock()
	now := s.cfg.Clock.Now()
	if es.deleted || es.ep.Type != core.TypeQueue || es.active.Load() > 0 || es.ep.Workers.Max == 0 || s.backingOff(es, now) {
		return
	}
	if err := s.startLocked(es, now, "scale_from_zero"); err == nil {
		s.cfg.Log.Info("scaling up", "endpoint", es.ep.ID, "from", 0, "to", 1, "reason", "scale from zero: a job arrived")
	}
}
