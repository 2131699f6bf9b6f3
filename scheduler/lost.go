package scheduler

import "context"

// workerLost stops a worker the job engine declared lost (silent while holding a job) by
// force, at once: it leaves the endpoint's active workers and shows as STOPPING until it
// exits. The engine puts its jobs back in the queue meanwhile; whichever comes second, that
// requeue's Demand or the one here, starts a replacement at once on an endpoint left with no
// worker.
func (s *Scheduler) workerLost(worker string) {
	v, ok := s.byID.Load(worker)
	if !ok {
		return
	}
	w := v.(*workerRec)
	es := w.es
	es.mu.Lock()
	if w.state == phaseStopping && w.killed {
		es.mu.Unlock()
		return
	}
	s.metrics.decision(es.ep.ID, "down", "lost")
	s.killLocked(w, "lost: it stopped answering while holding a job")
	id := es.ep.ID
	es.mu.Unlock()
	s.Demand(id)
}

// killLocked stops a worker by force (Kill when its pool has it, else Stop); a worker already
// being stopped politely is killed too. es.mu is held.
func (s *Scheduler) killLocked(w *workerRec, why string) {
	if w.state == phaseSuspended {
		s.suspended.remove(w)
	}
	w.state, w.stopping, w.killed = phaseStopping, true, true
	w.es.recount()
	s.publish(w.es)
	s.cfg.Log.Warn("killing a worker", "endpoint", w.es.ep.ID, "worker", w.id, "reason", why)
	if !w.starting {
		s.call(func(ctx context.Context) { s.stopCall(ctx, w) })
	}
}
