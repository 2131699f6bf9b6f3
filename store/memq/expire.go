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

// deadlineBlock is how many deadlines one block of a heap holds (32 KiB).
const deadlineBlock = 1024

// deadlines is a binary min-heap of deadlines by time (container/heap), kept in blocks of
// deadlineBlock: it grows and shrinks a block at a time. One slice of every live job's
// deadline grew by copying itself whole under dmu, which every insert takes; with a million
// live jobs that held inserts for tens of milliseconds, a stall that grew with the backlog.
type deadlines struct {
	blocks [][]deadline // each deadlineBlock long; entry i is blocks[i/deadlineBlock][i%deadlineBlock]
	n      int
}

func (h *deadlines) at(i int) *deadline { return &h.blocks[i/deadlineBlock][i%deadlineBlock] }

func (h *deadlines) Len() int           { return h.n }
func (h *deadlines) Less(i, k int) bool { return h.at(i).at < h.at(k).at }
func (h *deadlines) Swap(i, k int)      { a, b := h.at(i), h.at(k); *a, *b = *b, *a }
func (h *deadlines) Push(x any) {
	if h.n == len(h.blocks)*deadlineBlock {
		h.blocks = append(h.blocks, make([]deadline, deadlineBlock))
	}
	*h.at(h.n) = x.(deadline)
	h.n++
}
func (h *deadlines) Pop() any {
	h.n--
	d := *h.at(h.n)
	// A block is freed once two are empty, so a heap that shrinks and grows around a block's
	// edge does not allocate each time.
	if k := len(h.blocks); k >= 2 && h.n <= (k-2)*deadlineBlock {
		h.blocks[k-1] = nil
		h.blocks = h.blocks[:k-1]
	}
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
	if h.Len() == 0 || h.at(0).at > now {
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
		// The job leaves its owner's list. The owner is in the record: the one held in
		// memory, or read (before it is deleted) on an endpoint whose jobs have several owners.
		owner, known := "", false
		if e.x != nil && e.x.rec != nil {
			owner, known = e.x.rec.Owner, true
		}
		seq, ended := e.seq(), e.state().terminal()
		ep.count(e.state(), 0, e.low())
		s.dropHot(&e)
		if !e.state().terminal() {
			s.wake(&e) // waiters of a job that expired before it ended
		}
		sh.remove(k, &e)
		sh.mu.Unlock()
		if !known && !ep.lists.single() {
			if rec, err := s.rec.GetJob(x.ID); err == nil {
				owner, known = rec.Owner, true
			}
		}
		ep.lists.remove(owner, known, seq, ended)
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
