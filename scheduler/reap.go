package scheduler

import (
	"context"
	"time"
)

// reap stops the workers that pools report but this scheduler did not start: workers an
// earlier run of Gantry left (pods, containers) and workers of endpoints deleted meanwhile.
// Their jobs were already handed back by the worker-lost rule, and their tokens name a
// scheduler that is gone, so running them on would only hold GPUs. Pools that cannot list
// their workers are skipped.
func (s *Scheduler) reap(ctx context.Context) {
	for _, sl := range s.placer.order {
		lister, ok := sl.pool.(WorkerLister)
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		workers, err := lister.Workers(ctx)
		if err != nil {
			s.cfg.Log.Error("listing a pool's workers to reap those left behind", "pool", sl.info.ID, "err", err)
		}
		for _, w := range workers {
			if w.Known {
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
