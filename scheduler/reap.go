package scheduler

import (
	"context"
	"github.com/gantryhq/gantry/pool"
	"time"
)

// reap deals with the workers that pools report but this scheduler did not start: workers an
// earlier run of Gantry or the previous leader left (pods, containers), and workers of
// endpoints deleted meanwhile. A worker its pool can hand over (Adopter) whose endpoint still
// wants it as it runs (same revision, room under workers.max) is adopted: it keeps running and
// its token stays valid, so it goes on taking jobs. The others are stopped: their jobs follow
// the worker-lost rule. Pools that cannot list their workers are skipped. The endpoints must
// be synced first.
func (s *Scheduler) reap(ctx context.Context) {
	for _, sl := range s.placer.order {
		lister, ok := sl.pool.(pool.WorkerLister)
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		workers, err := lister.LiveWorkers(ctx)
		if err != nil {
			s.cfg.Log.Error("listing a pool's workers to reap those left behind", "pool", sl.info.ID, "err", err)
		}
		for _, w := range workers {
			if w.Known || s.adopt(ctx, sl, w) {
				continue
			}
			s.cfg.Log.Info("stopping a worker this scheduler did not start", "pool", sl.info.ID, "worker", w.ID, "endpoint", w.Endpoint)
			if err := sl.pool.Stop(ctx, w.ID); err != nil {
				s.cfg.Log.Error("stopping a worker left behind", "pool", sl.info.ID, "worker", w.ID, "err", err)
			}
		}
		cancel()
	}
}

// adopt takes over a worker the pool found, when the pool can and the worker's endpoint still
// wants it; it reports whether it did.
func (s *Scheduler) adopt(ctx context.Context, sl *slot, lw pool.LiveWorker) bool {
	ad, ok := sl.pool.(pool.Adopter)
	es := s.state(lw.Endpoint)
	if !ok || sl.elastic == nil || lw.Revision == "" || lw.Count <= 0 || es == nil {
		return false
	}
	es.mu.Lock()
	if es.deleted || revision(&es.ep) != lw.Revision || es.active.Load() >= int32(max(es.ep.Workers.Max, 0)) {
		es.mu.Unlock()
		return false
	}
	res := sl.adopt(lw.Count)
	w := &workerRec{id: lw.ID, es: es, res: res, gen: es.gen, state: phaseBooting, startedAt: s.cfg.Clock.Now()}
	queue := es.queueType
	if !queue {
		w.lb = &backend{w: w}
	}
	es.workers = append(es.workers, w)
	s.byID.Store(w.id, w)
	es.recount()
	es.mu.Unlock()
	if queue { // its token, signed with the store's key, is still valid: the new one is not used
		_, act := s.cfg.Jobs.RegisterWorkerActivity(lw.Endpoint, lw.ID)
		es.mu.Lock()
		w.act = act
		es.mu.Unlock()
	}
	err := s.adapterCall(sl.info.ID, "Adopt", lw.ID, func() error { return ad.Adopt(ctx, lw, func(ev pool.WorkerEvent) { s.event(w, ev) }) })
	if err != nil {
		s.cfg.Log.Warn("adopting a worker; stopping it instead", "pool", sl.info.ID, "worker", lw.ID, "err", err)
		es.mu.Lock()
		s.forgetLocked(w)
		es.mu.Unlock()
		if queue {
			s.cfg.Jobs.ForgetWorker(ctx, lw.ID)
		}
		return false
	}
	s.metrics.decision(lw.Endpoint, "up", "adopted")
	s.cfg.Log.Info("adopted a running worker", "endpoint", lw.Endpoint, "worker", lw.ID, "pool", sl.info.ID, "gpus", lw.Count)
	return true
}
