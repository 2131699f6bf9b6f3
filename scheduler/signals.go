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
// another call (watchWorkers) are applied too: a tick, and a test, see every signal posted
// before they began.
func (s *Scheduler) applySignals() {
	s.sigMu.Lock()
	defer s.sigMu.Unlock()
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
