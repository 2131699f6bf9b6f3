package memq

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/core"
)

// endpoint is an endpoint's queue: a FIFO of job keys, the takers parked waiting on it, and
// its counters. Keys of jobs that left the queue (cancelled, purged, expired) stay until they
// reach the head, where takes and Stats skip them. Keys hold no pointers, so a long queue costs
// the garbage collector nothing to scan.
type endpoint struct {
	id   uint32
	name string

	mu sync.Mutex
	// blocks hold the keys oldest first, queueBlock to a block: the first from head on, the
	// last up to its length; every block but the last is full.
	blocks  [][]queued
	head    int
	n       int // keys held
	waiters []chan struct{}

	c *core.Counters // the job states counted, shared with the engine (core.CountingStore)

	lists lists // every live job of the endpoint, by owner and Seq, for List

	// What lets the autoscaler read the oldest queued job's time without a lock (oldestQueued):
	// leaves counts the jobs that left the queued state other than by a take (cancelled,
	// purged, expired); cleanAt is what leaves was, before the job was stored, when a key was
	// pushed onto the empty queue; headAt is when the head key was queued (0 = empty). While
	// leaves equals cleanAt, no key in the queue is of a job that left it.
	leaves  atomic.Uint64
	cleanAt atomic.Uint64
	headAt  atomic.Int64
}

// queued is a key in a queue and when it was queued (Unix nanoseconds).
type queued struct {
	key core.JobKey
	at  int64
}

// endpoint returns the endpoint's queue, adding it if new.
func (s *Store) endpoint(name string) *endpoint {
	s.epMu.RLock()
	id, ok := s.epIDs[name]
	s.epMu.RUnlock()
	if ok {
		return s.endpointByID(id)
	}
	s.epMu.Lock()
	defer s.epMu.Unlock()
	if id, ok := s.epIDs[name]; ok {
		return s.eps[id]
	}
	ep := &endpoint{id: uint32(len(s.eps)), name: name, c: new(core.Counters)}
	s.eps = append(s.eps, ep)
	s.epIDs[name] = ep.id
	return ep
}

// known returns the endpoint's queue, or nil when no job of it was ever stored.
func (s *Store) known(name string) *endpoint {
	s.epMu.RLock()
	defer s.epMu.RUnlock()
	if id, ok := s.epIDs[name]; ok {
		return s.eps[id]
	}
	return nil
}

func (s *Store) endpointByID(id uint32) *endpoint {
	s.epMu.RLock()
	defer s.epMu.RUnlock()
	return s.eps[id]
}

// count moves a job between the endpoint's counters (0 = none).
func (ep *endpoint) count(from, to state, low bool) {
	ep.add(from, -1, low)
	ep.add(to, +1, low)
	if from == stQueued && to != stRunning { // its key stays in the queue
		ep.leaves.Add(1)
	}
}

func (ep *endpoint) add(s state, d int64, low bool) {
	switch s {
	case stQueued:
		ep.c.Queued.Add(d)
		if low {
			ep.c.LowQueued.Add(d)
		}
	case stRunning:
		ep.c.InProgress.Add(d)
	case stCompleted:
		ep.c.Completed.Add(d)
	case stFailed, stTimedOut:
		ep.c.Failed.Add(d)
	}
}

// queueBlock is how many keys one block of a queue holds (32 KiB). A queue grows and shrinks a
// block at a time, so neither an insert nor a take ever copies the queue under its lock: one
// slice of all keys did, at each growth and compaction, and with a million keys queued that
// held every /run of the endpoint for tens of milliseconds, a stall that grew with the backlog.
const queueBlock = 1024

func (ep *endpoint) len() int { return ep.n }

// push appends a key; ep.mu is held (or the store is not shared yet). leaves is what ep.leaves
// was before the job was stored (see endpoint).
func (ep *endpoint) push(k core.JobKey, at int64, leaves uint64) {
	if ep.n == 0 {
		ep.cleanAt.Store(leaves)
		ep.headAt.Store(at)
	}
	if b := len(ep.blocks); b == 0 || len(ep.blocks[b-1]) >= queueBlock {
		ep.blocks = append(ep.blocks, make([]queued, 0, queueBlock))
	}
	last := &ep.blocks[len(ep.blocks)-1]
	*last = append(*last, queued{key: k, at: at})
	ep.n++
}

// first returns the oldest key; ep.mu is held and the queue is not empty.
func (ep *endpoint) first() queued { return ep.blocks[0][ep.head] }

// drop removes the oldest key; ep.mu is held and the queue is not empty.
func (ep *endpoint) drop() {
	b := ep.blocks[0]
	b[ep.head] = queued{}
	ep.head++
	ep.n--
	if ep.head == len(b) { // the oldest block is drained
		if len(ep.blocks) == 1 {
			ep.blocks[0] = b[:0] // the only one: reuse it
		} else {
			ep.blocks[0] = nil
			ep.blocks = ep.blocks[1:]
		}
		ep.head = 0
	}
	ep.setHead()
}

// setHead publishes the head key's queued time; ep.mu is held.
func (ep *endpoint) setHead() {
	if ep.n == 0 {
		ep.headAt.Store(0)
	} else {
		ep.headAt.Store(ep.first().at)
	}
}

// pop removes up to n keys from the head into buf; ep.mu is held.
func (ep *endpoint) pop(n int, buf []queued) []queued {
	for range min(n, ep.n) {
		buf = append(buf, ep.first())
		ep.drop()
	}
	return buf
}

// wakeOne signals the oldest parked taker; ep.mu is held.
func (ep *endpoint) wakeOne() {
	if len(ep.waiters) > 0 {
		w := ep.waiters[0]
		ep.waiters = ep.waiters[1:]
		w <- struct{}{} // buffered: never blocks
	}
}

// enqueue appends a key, wakes one parked taker, and tells the listeners. leaves is what
// ep.leaves was before the job was stored or queued again (see endpoint).
func (s *Store) enqueue(ep *endpoint, k core.JobKey, at int64, leaves uint64) {
	ep.mu.Lock()
	ep.push(k, at, leaves)
	ep.wakeOne()
	ep.mu.Unlock()
	s.notify(ep.name)
}

// Take moves up to max queued jobs IN_PROGRESS for the worker; see core.JobStore.
func (s *Store) Take(ctx context.Context, endpoint, worker string, max int, now time.Time) ([]core.TakenJob, error) {
	ep := s.known(endpoint)
	if ep == nil || max <= 0 {
		return nil, nil
	}
	var out []core.TakenJob
	var keys [8]queued
	for len(out) == 0 {
		ep.mu.Lock()
		if ep.len() == 0 {
			ep.mu.Unlock()
			return nil, nil
		}
		batch := ep.pop(max, keys[:0])
		if ep.len() > 0 {
			ep.wakeOne() // more work: pass the baton
		}
		ep.mu.Unlock()
		for i, q := range batch {
			t, ok, err := s.take(ep, q.key, worker, now)
			if err != nil {
				// On a read error the job stays queued, its key back at the head, and the
				// engine's next Take retries. A job whose record is gone can never be taken:
				// its key is dropped rather than block the queue (the job expires with its ttl).
				back := batch[i:]
				if errors.Is(err, core.ErrNotFound) {
					back = batch[i+1:]
				}
				s.requeueKeys(ep, back)
				return out, err
			}
			if ok {
				out = append(out, t)
			}
		}
	}
	s.workers.beat(worker, now.UnixNano())
	return out, nil
}

// requeueKeys puts keys popped but not taken back at the head of the queue.
func (s *Store) requeueKeys(ep *endpoint, keys []queued) {
	if len(keys) == 0 {
		return
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	// These keys were popped before the queue's clean mark (cleanAt) may have been set again,
	// and their jobs may have left since: the queue is not known clean now.
	ep.leaves.Add(1)
	back := make([]queued, len(keys), len(keys)+queueBlock)
	copy(back, keys)
	if len(ep.blocks) > 0 { // the rest of the first block joins them: every block but the last stays full
		back = append(back, ep.blocks[0][ep.head:]...)
		ep.blocks[0] = back
	} else {
		ep.blocks = [][]queued{back}
	}
	ep.head = 0
	ep.n += len(keys)
	ep.setHead()
	ep.wakeOne()
}

// take moves one queued job IN_PROGRESS; ok is false for a key whose job left the queue.
func (s *Store) take(ep *endpoint, k core.JobKey, worker string, now time.Time) (core.TakenJob, bool, error) {
	sh, e, found := s.lock(k)
	if !found || e.state() != stQueued || now.UnixNano() >= e.expiresAt {
		sh.mu.Unlock()
		return core.TakenJob{}, false, nil
	}
	var input []byte
	if e.x != nil {
		input = e.x.mem // a runsync job's, kept in memory (and there until it ends, for a requeue)
	}
	rec := (*core.Job)(nil)
	if e.x != nil && e.x.hot > 0 {
		rec = e.x.rec
		if input == nil {
			input = e.x.input
		}
		s.hotBytes.Add(-e.x.hot)
		e.x.input, e.x.hot = nil, 0
	} else {
		r, err := s.rec.GetJob(k.String())
		if err != nil {
			sh.mu.Unlock()
			return core.TakenJob{}, false, err
		}
		rec = r
	}
	rec.Status, rec.WorkerID, rec.StartedAt, rec.Output = core.InProgress, worker, now, nil
	e.extra().rec = rec // attached while it runs
	e.setState(stRunning)
	if err := s.rec.PutJob(rec, nil, false); err != nil { // a take lost in a crash is taken again
		s.log.Error("storing a taken job", "job", rec.ID, "err", err)
	}
	ep.count(stQueued, stRunning, e.low())
	s.scheduleTimeout(k, rec)
	t := core.TakenJob{Job: *rec}
	sh.put(k, e)
	s.workers.take(worker, k, now.UnixNano())
	if input == nil {
		var err error
		if input, err = s.rec.Input(t.Job.ID); err != nil { // the job is the worker's now
			s.log.Error("reading a taken job's input", "job", t.Job.ID, "err", err)
			input = []byte(`{}`)
		}
	}
	t.Input = input
	return t, true, nil
}

// WaitAvailable waits for a queued job of the endpoint; see core.JobStore.
func (s *Store) WaitAvailable(ctx context.Context, endpoint string) error {
	ep := s.endpoint(endpoint)
	ep.mu.Lock()
	if ep.len() > 0 {
		ep.mu.Unlock()
		return nil
	}
	ch := make(chan struct{}, 1)
	ep.waiters = append(ep.waiters, ch)
	ep.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		ep.mu.Lock()
		if i := slices.Index(ep.waiters, ch); i >= 0 {
			ep.waiters = slices.Delete(ep.waiters, i, i+1)
		} else if ep.len() > 0 {
			ep.wakeOne() // woken, but leaving: hand the wake-up on
		}
		ep.mu.Unlock()
		return ctx.Err()
	}
}

// Parked returns how many takers wait on the endpoint.
func (s *Store) Parked(endpoint string) int {
	ep := s.known(endpoint)
	if ep == nil {
		return 0
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return len(ep.waiters)
}

// headScan bounds how many lowPriority jobs Stats passes over to find the oldest one that
// may scale the endpoint up.
const headScan = 32

// Stats returns the endpoint's figures; see core.JobStore.
func (s *Store) Stats(ctx context.Context, endpoint string) (core.QueueStats, error) {
	if endpoint == "" {
		var total core.QueueStats
		s.epMu.RLock()
		eps := s.eps
		s.epMu.RUnlock()
		for _, ep := range eps {
			ep.addTo(&total)
		}
		return total, nil
	}
	ep := s.known(endpoint)
	if ep == nil {
		return core.QueueStats{}, nil
	}
	return s.statsOf(ep), nil
}

// Counters returns the endpoint's counters and its oldest queued job's reader; see
// core.CountingStore.
func (s *Store) Counters(endpoint string) (*core.Counters, func() time.Time) {
	ep := s.endpoint(endpoint)
	return ep.c, func() time.Time { return s.oldestQueued(ep) }
}

// statsOf returns the endpoint's figures.
func (s *Store) statsOf(ep *endpoint) core.QueueStats {
	var st core.QueueStats
	ep.addTo(&st)
	if st.Queued > st.LowQueued { // else no queued job scales the endpoint up: no head to read
		st.OldestQueuedAt = s.oldestQueued(ep)
	}
	return st
}

// oldestQueued returns when the oldest queued job that may scale the endpoint up was queued;
// zero when none is within headScan keys of the head.
func (s *Store) oldestQueued(ep *endpoint) time.Time {
	// The head key is a queued job's, and not a lowPriority one's, when no job left the queue
	// since it was last empty and none queued is lowPriority: its time is the answer, read
	// without a lock. (headAt may lag a take by a moment: the same as reading a moment earlier.)
	if ep.c.LowQueued.Load() == 0 && ep.leaves.Load() == ep.cleanAt.Load() {
		if at := ep.headAt.Load(); at != 0 {
			return time.Unix(0, at)
		}
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	// Keys of jobs that left the queue are dropped from the head here, up to headScan a read.
	// Lock order: an endpoint's lock, then a shard's, never the reverse. Most calls look at
	// the head's key only: the autoscaler reads this for every busy endpoint on every tick.
	for n := 0; ep.n > 0 && n < headScan; n++ {
		q := ep.first()
		switch s.look(q.key) {
		case keyQueued:
			return time.Unix(0, q.at)
		case keyLeft:
			ep.drop()
			continue
		}
		break // a lowPriority job's: the one that may scale up is further on
	}
	seen := 0
	for bi, from := 0, ep.head; bi < len(ep.blocks) && seen < headScan; bi, from = bi+1, 0 {
		for _, q := range ep.blocks[bi][from:] {
			if s.look(q.key) == keyQueued {
				return time.Unix(0, q.at)
			}
			if seen++; seen == headScan {
				break
			}
		}
	}
	return time.Time{}
}

const (
	keyQueued = iota // a queued job's key, or one whose shard a write holds
	keyLow           // a queued lowPriority job's key
	keyLeft          // the key of a job no longer queued
)

// look says what a queued key is now. A shard a write holds is not waited for (the autoscaler
// reads this every tick): its job counts as queued, not low.
func (s *Store) look(k core.JobKey) int {
	sh := s.shard(k)
	if !sh.mu.TryLock() {
		return keyQueued
	}
	e, ok := sh.jobs[k]
	sh.mu.Unlock()
	switch {
	case !ok || e.state() != stQueued:
		return keyLeft
	case e.low():
		return keyLow
	}
	return keyQueued
}

func (ep *endpoint) addTo(st *core.QueueStats) {
	st.Queued += ep.c.Queued.Load()
	st.LowQueued += ep.c.LowQueued.Load()
	st.InProgress += ep.c.InProgress.Load()
	st.Completed += ep.c.Completed.Load()
	st.Failed += ep.c.Failed.Load()
}

// listener is a ListenAvailable call.
type listener struct{ fn func(endpoint string) }

// ListenAvailable subscribes fn until ctx ends; see core.JobStore.
func (s *Store) ListenAvailable(ctx context.Context, fn func(endpoint string)) error {
	l := &listener{fn: fn}
	s.setListeners(func(ls []*listener) []*listener { return append(ls, l) })
	context.AfterFunc(ctx, func() {
		s.setListeners(func(ls []*listener) []*listener {
			return slices.DeleteFunc(ls, func(x *listener) bool { return x == l })
		})
	})
	return nil
}

// setListeners replaces the listeners with a changed copy: notify reads them without a lock.
func (s *Store) setListeners(change func([]*listener) []*listener) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	var cur []*listener
	if p := s.listeners.Load(); p != nil {
		cur = *p
	}
	next := change(slices.Clone(cur))
	s.listeners.Store(&next)
}

// notify tells the listeners a job was queued on the endpoint.
func (s *Store) notify(endpoint string) {
	if p := s.listeners.Load(); p != nil {
		for _, l := range *p {
			l.fn(endpoint)
		}
	}
}
