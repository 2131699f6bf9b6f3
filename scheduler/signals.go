package scheduler

import "github.com/gantryhq/gantry/core"

// This file applies the job engine's signals about workers (core.WorkerSignals): a worker's
// first poll since it started or resumed ends its cold start, and a worker lost is killed.

// watchWorkers applies the engine's signals as they come, until Close.
func (s *Scheduler) watchWorkers() {
	defer s.watching.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.signals.C():
			s.applySignals()
		}
	}
}

// applySignals applies the signals waiting. A call returns only once the signals taken by
// another call (watchWorkers) are applied too: a test sees every signal posted before it
// began.
func (s *Scheduler) applySignals() {
	s.sigMu.Lock()
	defer s.sigMu.Unlock()
	s.applyLocked()
}

// tryApplySignals is applySignals for a tick: when watchWorkers is applying signals at that
// moment, the tick does not wait for it. Applying takes each endpoint's lock, and under load
// the goroutine holding one may wait tens of milliseconds for a CPU; a tick that waited with
// it would hold up every endpoint's decision (the burst simulation's tick wall-time p99 was
// several times its CPU time). A signal the tick misses is applied by watchWorkers at once,
// and the decisions it changes (a booting worker that became ready, a lost one) come a tick
// later at worst.
func (s *Scheduler) tryApplySignals() {
	if s.tickWaits {
		s.applySignals() // tests: decisions, not lock avoidance
		return
	}
	if !s.sigMu.TryLock() {
		return
	}
	defer s.sigMu.Unlock()
	s.applyLocked()
}

// applyLocked applies the signals waiting; sigMu is held.
func (s *Scheduler) applyLocked() {
	s.sigBuf = s.signals.Take(s.sigBuf[:0])
	for _, sig := range s.sigBuf {
		switch sig.Kind {
		case core.WorkerReady:
			s.workerReady(sig.Worker, sig.At)
		case core.WorkerLost:
			s.workerLost(sig.Worker)
		}
	}
	clear(s.sigBuf) // no worker ids kept alive until the next signal
}
