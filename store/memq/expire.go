package memq

import (
	"container/heap"
	"context"
	"time"

	"github.com/gantryhq/gantry/core"
)

// deadline is when something may be due for a job; stale ones (the job moved on) are skipped
// when they come due.
type deadline struct {
	at  int64 // Unix nanoseconds
	key core.JobKey
}

type deadlines []deadline

func (h deadlines) Len() int           { return len(h) }
func (h deadlines) Less(i, k int) bool { return h[i].at < h[k].at }
func (h deadlines) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *deadlines) Push(x any)        { *h = append(*h, x.(deadline)) }
func (h *deadlines) Pop() any {
	old := *h
	d := old[len(old)-1]
	*h = old[:len(old)-1]
	return d
}

func (s *Store) schedule(h *deadlines, k core.JobKey, at int64) {
	s.dmu.Lock()
	heap.Push(h, deadline{at: at, key: k})
	s.dmu.Unlock()
}

// scheduleTimeout schedules a running job's execution timeout, if it has one.
func (s *Store) scheduleTimeout(k core.JobKey, rec *core.Job) {
	if rec.TimeoutMs > 0 {
		s.schedule(&s.timeouts, k, rec.StartedAt.Add(time.Duration(rec.TimeoutMs)*time.Millisecond).UnixNano())
	}
}

// due pops the next deadline of h at or before now.
func (s *Store) due(h *deadlines, now int64) (core.JobKey, bool) {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	if h.Len() == 0 || (*h)[0].at > now {
		return core.JobKey{}, false
	}
	return heap.Pop(h).(deadline).key, true
}

// Expire removes the jobs past their ExpiresAt; see core.JobStore.
func (s *Store) Expire(ctx context.Context, now time.Time) ([]core.ExpiredJob, error) {
	var out []core.ExpiredJob
	for {
		k, ok := s.due(&s.expiry, now.UnixNano())
		if !ok {
			break
		}
		sh, e, found := s.lock(k)
		if !found || now.UnixNano() < e.expiresAt {
			sh.mu.Unlock()
			continue
		}
		ep := s.endpointByID(e.ep())
		x := core.ExpiredJob{ID: k.String(), Endpoint: ep.name, Status: e.state().status(), LowPriority: e.low()}
		if e.state() == stRunning && e.x != nil && e.x.rec != nil {
			x.WorkerID = e.x.rec.WorkerID
			s.workers.release(x.WorkerID, k)
		}
		ep.count(e.state(), 0, e.low())
		s.dropHot(&e)
		if !e.state().terminal() {
			s.wake(&e) // waiters of a job that expired before it ended
		}
		delete(sh.jobs, k)
		sh.mu.Unlock()
		if err := s.rec.DeleteJob(x.ID); err != nil { // a delete lost in a crash is redone at Open
			s.log.Error("deleting an expired job", "job", x.ID, "err", err)
		}
		out = append(out, x)
	}
	return out, nil
}

// Overdue returns the running jobs past their execution timeout; see core.JobStore.
func (s *Store) Overdue(ctx context.Context, now time.Time) ([]string, error) {
	var out []string
	for {
		k, ok := s.due(&s.timeouts, now.UnixNano())
		if !ok {
			return out, nil
		}
		sh, e, found := s.lock(k)
		if found && e.state() == stRunning && e.x != nil && e.x.rec != nil {
			rec := e.x.rec
			if !now.Before(rec.StartedAt.Add(time.Duration(rec.TimeoutMs) * time.Millisecond)) {
				out = append(out, k.String())
			}
		}
		sh.mu.Unlock()
	}
}
