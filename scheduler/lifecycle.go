package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// This file is a worker's lifecycle: start (or resume), retire (suspend or stop), stop,
// forget, and the pools' events about it.

// workerRec is one worker of an endpoint.
type workerRec struct {
	id        string
	es        *epState
	res       *Reservation
	gen       int
	state     workerPhase
	startedAt time.Time // last start or resume decision
	polled    bool      // it polled at least once since it started
	resumed   bool      // the current cold start is a resume
	stopping  bool      // Stop was called: its exit is expected
	starting  bool      // its pool's Start has not returned yet: a stop waits for it (stopCall)
	killed    bool      // killed as lost (lost.go)
	failed    bool      // its stop counts as a crash (init timeout)
	pinned    bool      // suspended by a PRIORITY_FLASHBOOT endpoint: reclaimed last
	susAt     time.Time
	lb        *backend            // a LOAD_BALANCER worker's HTTP side; nil for queue workers
	act       core.WorkerActivity // a queue worker's activity, read without the job engine's lock
	coldStart time.Duration       // how long its last start or resume took
	waiting   string              // why its pool cannot run it yet (WorkerWaiting); "" = not waiting
	base      string              // a queue worker's base URL: the replica it reaches (replicas.go)
	spread    bool                // base was picked among the replicas: counted, and stopped when it leaves
}

type workerPhase int

const (
	phaseBooting    workerPhase = iota + 1 // started or resuming, not polling yet
	phaseReady                             // polls for jobs
	phaseSuspending                        // being suspended
	phaseSuspended                         // suspended (FLASHBOOT)
	phaseStopping                          // stopped, waiting for its exit
)

// workerReady applies the job engine's signal that a worker polled for the first time since it
// started or resumed, at: the end of its cold start.
func (s *Scheduler) workerReady(worker string, at time.Time) {
	v, ok := s.byID.Load(worker)
	if !ok {
		return
	}
	w := v.(*workerRec)
	es := w.es
	es.mu.Lock()
	defer es.mu.Unlock()
	if w.state != phaseBooting {
		return
	}
	s.readyLocked(w, at)
}

// readyLocked marks a booting worker ready: it polled at. es.mu is held.
func (s *Scheduler) readyLocked(w *workerRec, at time.Time) {
	es := w.es
	d := max(at.Sub(w.startedAt), 0) // the engine's and the scheduler's clocks may differ
	w.state, w.polled, w.coldStart = phaseReady, true, d
	es.failures, es.failure = 0, ""
	es.cold.n++
	es.cold.last = d
	es.cold.total += d
	s.metrics.coldStart(es.ep.ID, w.resumed, d)
	es.recount()
	s.publish(es)
	if w.lb != nil {
		es.lbRebuild() // it takes requests from now on
	}
	s.cfg.Log.Info("worker ready", "endpoint", es.ep.ID, "worker", w.id, "coldStart", d, "resumed", w.resumed)
}

// count returns how many of the endpoint's workers are in the phases.
func (es *epState) count(phases ...workerPhase) int {
	n := 0
	for _, w := range es.workers {
		if slices.Contains(phases, w.state) {
			n++
		}
	}
	return n
}

// recount follows a change to the workers' phases: it counts them again in one pass.
func (es *epState) recount() {
	es.changes++
	active, parked, suspended := 0, 0, 0
	for _, w := range es.workers {
		switch w.state {
		case phaseBooting, phaseReady:
			active++
		case phaseSuspended:
			suspended++
			parked++
		case phaseSuspending:
			parked++
		}
	}
	es.parked, es.suspended = parked, suspended
	es.active.Store(int32(active))
}

// startLocked starts one worker for the endpoint (resuming a suspended one first). es.mu is
// held; the pool call runs in the background.
func (s *Scheduler) startLocked(es *epState, now time.Time, code string) error {
	if s.closed.Load() || s.holding.Load() {
		return errors.New("the scheduler is closed or stopping")
	}
	if s.following.Load() {
		return errors.New("another replica leads: it starts the workers")
	}
	if w := s.resumable(es); w != nil {
		w.state, w.startedAt, w.resumed, w.polled = phaseBooting, now, true, false
		es.recount()
		s.metrics.decision(es.ep.ID, "up", code)
		s.call(func(ctx context.Context) {
			err := s.adapterCall(w.res.PoolID(), "Resume", w.id, func() error { return w.res.Pool().Resume(ctx, w.id) })
			if err != nil {
				s.cfg.Log.Warn("resuming a worker; starting a fresh one instead", "endpoint", es.ep.ID, "worker", w.id, "err", err)
				es.mu.Lock()
				s.stopLocked(w, "resume failed")
				es.mu.Unlock()
				return
			}
			if w.lb != nil {
				w.lb.state.Store(lbInit) // ready again once its health says so
				return
			}
			s.cfg.Jobs.ResumeWorker(w.id)
		})
		return nil
	}
	res, err := s.placer.Place(es.want)
	if err != nil {
		es.throttled++
		es.noRoom, _ = err.(*NoRoomError)
		s.reclaim(es.want)
		return err
	}
	ep := &es.ep
	id := ep.ID + "-" + core.NewID(8)
	w := &workerRec{id: id, es: es, res: res, gen: es.gen, state: phaseBooting, startedAt: now, starting: true}
	spec := pool.WorkerSpec{ID: id, Endpoint: ep.ID, Image: ep.Image, Args: ep.Args, Ports: ep.Ports, Disk: ep.Disk,
		GPUs: res.GPUs, GPUCount: res.Count, CUDAVersions: slices.Clone(ep.AllowedCudaVersions),
		Report: func(ev pool.WorkerEvent) { s.event(w, ev) }}
	if ep.Registry != nil {
		spec.Registry = *ep.Registry
	}
	if ep.Type == core.TypeLoadBalancer {
		w.lb = &backend{w: w}
	} else {
		w.base, w.spread = s.workerBase(res.Pool())
	}
	es.workers = append(es.workers, w)
	s.byID.Store(id, w)
	es.recount()
	s.metrics.decision(ep.ID, "up", code)
	epc := *ep // the environment is built off the tick, from this copy
	s.call(func(ctx context.Context) {
		spec.Revision = revision(&epc)
		if epc.Type == core.TypeLoadBalancer {
			s.lbSpec(&epc, res, &spec)
		} else {
			// The job engine's worker registry is shared by every Take and Done: registering
			// here keeps its lock out of the tick. The worker cannot poll (and so become
			// ready, when the tick first reads its activity) before it starts, below.
			token, act := s.cfg.Jobs.RegisterWorkerActivity(epc.ID, id)
			es.mu.Lock()
			w.act = act
			es.mu.Unlock()
			spec.Env = s.env(&epc, res, id, token, w.base)
		}
		err := s.attachVolume(ctx, &epc, res.Pool(), &spec)
		volumeFailed := err != nil // the worker never runs without its volume
		if err == nil {
			err = s.adapterCall(res.PoolID(), "Start", id, func() error { return res.Pool().Start(ctx, spec) })
		}
		es.mu.Lock()
		w.starting = false
		stopped := err == nil && w.state == phaseStopping
		es.mu.Unlock()
		if stopped { // stopped while its pool was starting it: the stop is due now (stopCall)
			s.stopCall(ctx, w)
		}
		if err != nil {
			s.cfg.Log.Error("starting a worker", "endpoint", spec.Endpoint, "pool", res.PoolID(), "image", spec.Image, "err", err)
			var p *AdapterPanic
			panicked := errors.As(err, &p)
			es.mu.Lock()
			if errors.Is(err, pool.ErrNoCapacity) && !panicked {
				s.refuse(es, s.cfg.Clock.Now(), res.PoolID(), err)
			} else {
				s.fail(es, s.cfg.Clock.Now(), fmt.Sprintf("pool %s could not start it: %v", res.PoolID(), err))
			}
			if volumeFailed { // the workers list shows it, with why
				es.remember(w, pool.WorkerEvent{Worker: id, State: pool.WorkerExited, Err: err}, s.cfg.Clock.Now())
			}
			s.forgetLocked(w)
			w.stopping = panicked // an exit event, if one comes, is no second failure
			es.mu.Unlock()
			s.cfg.Jobs.ForgetWorker(ctx, id)
			if panicked { // it may have started the worker before it panicked
				_ = s.adapterCall(res.PoolID(), "Stop", id, func() error { return res.Pool().Stop(ctx, id) })
			}
			return
		}
		es.mu.Lock()
		es.refusal, es.refusedUntil = "", time.Time{} // a start succeeded: no longer throttled by a refusal
		es.mu.Unlock()
		s.cfg.Log.Info("worker started", "endpoint", spec.Endpoint, "worker", id, "pool", res.PoolID(), "gpus", res.GPUs)
	})
	return nil
}

// call runs a pool call in the background, tracked by Close.
func (s *Scheduler) call(fn func(ctx context.Context)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn(s.ctx)
	}()
}

// resumable takes the endpoint's most recently suspended worker out of the suspended set.
func (s *Scheduler) resumable(es *epState) *workerRec {
	if es.suspended == 0 {
		return nil
	}
	var best *workerRec
	for _, w := range es.workers {
		if w.state == phaseSuspended && w.gen == es.gen && (best == nil || w.susAt.After(best.susAt)) {
			best = w
		}
	}
	if best == nil || !s.suspended.remove(best) {
		return nil // none, or being reclaimed
	}
	return best
}

// reclaim stops one suspended worker on a pool the want could use, to free its capacity:
// FLASHBOOT workers before PRIORITY_FLASHBOOT ones, the longest suspended first.
func (s *Scheduler) reclaim(want Want) {
	best := s.suspended.reclaimable(want.Pools)
	if best == nil {
		return
	}
	s.call(func(context.Context) { // another endpoint's lock: taken outside ours
		best.es.mu.Lock()
		defer best.es.mu.Unlock()
		if best.state == phaseSuspended {
			s.stopLocked(best, "its capacity is needed by another endpoint")
			s.metrics.decision(best.es.ep.ID, "down", "reclaimed")
		}
	})
}

// retireLocked takes an idle worker out of service: suspended when the endpoint uses
// FLASHBOOT (and the worker still matches it), stopped otherwise. The job engine first stops
// handing it jobs; if it took one meanwhile, it stays.
func (s *Scheduler) retireLocked(w *workerRec, why string, mayKeep bool) {
	es := w.es
	keep := mayKeep && es.ep.Flashboot != core.FlashbootOff && w.gen == es.gen &&
		es.parked < max(es.ep.Workers.Max, 1)
	prev := w.state
	w.state = phaseSuspending
	es.recount()
	s.cfg.Log.Info("scaling down", "endpoint", es.ep.ID, "worker", w.id, "reason", why, "suspend", keep)
	fenced := true
	if w.lb != nil {
		fenced = es.lbFence(w.lb)
	}
	s.call(func(ctx context.Context) {
		if !fenced || (w.lb == nil && !s.cfg.Jobs.SuspendWorker(ctx, w.id)) { // it took work after all
			es.mu.Lock()
			if w.state == phaseSuspending {
				w.state = prev
				es.recount()
			}
			es.mu.Unlock()
			return
		}
		var err error
		if keep {
			err = s.adapterCall(w.res.PoolID(), "Suspend", w.id, func() error { return w.res.Pool().Suspend(ctx, w.id) })
			if err != nil && !errors.Is(err, pool.ErrUnsupported) {
				s.cfg.Log.Warn("suspending a worker; stopping it", "worker", w.id, "err", err)
			}
		}
		es.mu.Lock()
		defer es.mu.Unlock()
		if w.state != phaseSuspending {
			return // stopped meanwhile
		}
		if !keep || err != nil {
			s.stopLocked(w, why)
			return
		}
		w.state, w.susAt = phaseSuspended, s.cfg.Clock.Now()
		w.pinned = es.ep.Flashboot == core.FlashbootPriority
		es.recount()
		if w.lb != nil {
			w.lb.state.Store(lbSuspended)
		}
		s.suspended.add(w)
	})
}

// stopLocked stops a worker; its exit event forgets it. es.mu is held.
func (s *Scheduler) stopLocked(w *workerRec, why string) {
	if w.state == phaseStopping {
		return
	}
	if w.state == phaseSuspended {
		s.suspended.remove(w)
	}
	w.state, w.stopping = phaseStopping, true
	w.es.recount()
	s.cfg.Log.Info("stopping a worker", "endpoint", w.es.ep.ID, "worker", w.id, "reason", why)
	if !w.starting {
		s.call(func(ctx context.Context) { s.stopCall(ctx, w) })
	}
}

// stopCall asks the worker's pool to stop it (Kill, when it was killed and the pool can). A
// worker whose Start is still running gets it once Start returns, from the goroutine that
// called Start: to a pool, a Stop for a worker it has not started yet stops nothing, and the
// worker would then run, holding its reservation, with no one left to stop it.
func (s *Scheduler) stopCall(ctx context.Context, w *workerRec) {
	pl, poolID := w.res.Pool(), w.res.PoolID()
	stop, call := pl.Stop, "Stop"
	if k, ok := pl.(pool.Killer); ok && w.killed {
		stop, call = k.Kill, "Kill"
	}
	if err := s.adapterCall(poolID, call, w.id, func() error { return stop(ctx, w.id) }); err != nil {
		s.cfg.Log.Error("stopping a worker", "worker", w.id, "call", call, "err", err)
	}
}

// forgetLocked drops a worker that is gone and gives its capacity back.
func (s *Scheduler) forgetLocked(w *workerRec) {
	if w.state == phaseSuspended {
		s.suspended.remove(w)
	}
	if i := slices.Index(w.es.workers, w); i >= 0 {
		w.es.workers = slices.Delete(w.es.workers, i, i+1)
	}
	s.byID.Delete(w.id)
	s.releaseBase(w)
	w.res.Release()
	w.es.recount()
	if w.lb != nil {
		w.lb.state.Store(lbDraining)
		if w.lb.cancel != nil {
			w.lb.cancel()
		}
		w.es.lbRebuild()
	}
}

// event applies a pool's report about a worker.
func (s *Scheduler) event(w *workerRec, ev pool.WorkerEvent) {
	if ev.State == pool.WorkerRunning && w.lb != nil {
		s.lbRunning(w, ev.Addrs)
	}
	es := w.es
	if ev.State == pool.WorkerWaiting || ev.State == pool.WorkerRunning {
		es.mu.Lock()
		was := w.waiting
		w.waiting = ""
		if ev.State == pool.WorkerWaiting {
			w.waiting = "the pool cannot run it yet"
			if ev.Err != nil {
				w.waiting = ev.Err.Error()
			}
		} else if was != "" {
			w.startedAt = s.cfg.Clock.Now() // the init timeout counts from its real start
		}
		if was != w.waiting {
			s.publish(es)
		}
		es.mu.Unlock()
		return
	}
	if ev.State != pool.WorkerExited {
		return
	}
	es.mu.Lock()
	w.waiting = ""
	if !w.stopping && !w.polled {
		why := "it exited before taking a job"
		if ev.Err != nil {
			why = fmt.Sprintf("it exited before taking a job: %v", ev.Err)
		}
		s.fail(es, s.cfg.Clock.Now(), fmt.Sprintf("worker %s: %s", w.id, why))
		s.metrics.decision(es.ep.ID, "down", "crashed")
	}
	es.remember(w, ev, s.cfg.Clock.Now())
	s.forgetLocked(w)
	s.publish(es)
	es.mu.Unlock()
	s.cfg.Log.Info("worker exited", "endpoint", es.ep.ID, "worker", w.id, "err", ev.Err, "stopped", ev.Stopped)
	// An exit is applied even while the scheduler closes (WaitStopped waits for the exits):
	// the store's writes (its jobs back to the queue, its token revoked) outlive s.ctx.
	s.cfg.Jobs.ForgetWorker(context.WithoutCancel(s.ctx), w.id) // its jobs follow the worker-lost rule; this may call Demand
}
