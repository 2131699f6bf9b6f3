package scheduler

import (
	"cmp"
	"context"
	"errors"
	"io"
	"io/fs"
	"slices"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// This file is what the API shows of an endpoint's workers (core.Fleet): each worker's state,
// the ones that exited lately, and their logs.

// keepExited is how many exited workers an endpoint remembers for worker visibility.
const keepExited = 10

type exitedWorker struct {
	info core.WorkerInfo
	pool pool.Pool
}

// remember keeps an exiting worker's last state; es.mu is held.
func (es *epState) remember(w *workerRec, ev pool.WorkerEvent, now time.Time) {
	info := w.info(nil)
	info.Status, info.ExitedAt = "EXITED", now
	if ev.Err != nil {
		info.Error = ev.Err.Error()
	}
	es.exited = append(es.exited, exitedWorker{info: info, pool: w.res.Pool()})
	if len(es.exited) > keepExited {
		es.exited = slices.Delete(es.exited, 0, len(es.exited)-keepExited)
	}
}

// info describes a worker; js is nil for an exiting one. es.mu is held.
func (w *workerRec) info(js core.WorkerRegistry) core.WorkerInfo {
	i := core.WorkerInfo{ID: w.id, Pool: w.res.PoolID(), GPUs: slices.Clone(w.res.GPUs), StartedAt: w.startedAt,
		ColdStart: w.coldStart}
	switch w.state {
	case phaseBooting:
		i.Status, i.ColdStart = "INITIALIZING", 0
	case phaseSuspending, phaseSuspended:
		i.Status = "SUSPENDED"
	case phaseStopping:
		i.Status = "STOPPING"
	default:
		i.Status = "IDLE"
		if b := w.lb; b != nil {
			i.Jobs = int(b.inflight.Load())
			if b.state.Load() == lbUnhealthy {
				i.Status = "UNHEALTHY"
			}
		} else if js != nil {
			st, _ := js.WorkerStatus(w.id)
			i.Jobs = st.Busy
			if st.Unhealthy != "" {
				i.Status = "UNHEALTHY"
			}
		}
		if i.Status == "IDLE" && i.Jobs > 0 {
			i.Status = "RUNNING"
		}
	}
	return i
}

// EndpointWorkers returns the endpoint's workers, newest first, then the ones that exited lately,
// newest first. It implements core.Fleet.
func (s *Scheduler) EndpointWorkers(endpoint string) []core.WorkerInfo {
	es := s.state(endpoint)
	if es == nil {
		return nil
	}
	es.mu.Lock()
	defer es.mu.Unlock()
	out := make([]core.WorkerInfo, 0, len(es.workers)+len(es.exited))
	for _, w := range es.workers {
		out = append(out, w.info(s.cfg.Jobs))
	}
	slices.SortFunc(out, func(a, b core.WorkerInfo) int {
		return cmp.Or(b.StartedAt.Compare(a.StartedAt), cmp.Compare(a.ID, b.ID))
	})
	for i := len(es.exited) - 1; i >= 0; i-- {
		out = append(out, es.exited[i].info)
	}
	return out
}

// WorkerLogs returns the last tail lines of a worker's output, from its pool. It implements
// core.Fleet.
func (s *Scheduler) WorkerLogs(ctx context.Context, endpoint, worker string, tail int) (io.ReadCloser, error) {
	es := s.state(endpoint)
	var pl pool.Pool
	if es != nil {
		es.mu.Lock()
		for _, w := range es.workers {
			if w.id == worker {
				pl = w.res.Pool()
			}
		}
		for _, x := range es.exited {
			if x.info.ID == worker {
				pl = x.pool
			}
		}
		es.mu.Unlock()
	}
	if pl == nil {
		return nil, core.Errorf(core.KindNotFound, "endpoint %s has no worker %s (running or lately exited)", endpoint, worker)
	}
	src, ok := pl.(pool.LogSource)
	if !ok {
		return nil, core.Errorf(core.KindUnavailable, "pool %s keeps no worker logs", pl.Describe().ID)
	}
	var rc io.ReadCloser
	err := s.adapterCall(pl.Describe().ID, "Logs", worker, func() (err error) {
		rc, err = src.Logs(ctx, worker, tail)
		return err
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, core.Errorf(core.KindNotFound, "worker %s left no logs", worker)
	}
	if err != nil {
		return nil, core.Internal("reading worker logs", err)
	}
	return rc, nil
}
