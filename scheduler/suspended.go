package scheduler

import (
	"sync"
	"sync/atomic"
)

// suspendedWorkers is the suspended (FLASHBOOT) workers by pool, for resuming them and for
// reclaiming their capacity. Each pool's set has its own lock and a count read without it, so
// the tick passes a pool with none by without locking anything, and work on one pool's set
// never waits for another's: a lock shared by every pool, taken on each failed placement, was
// the tick's most contended one under load.
type suspendedWorkers struct {
	pools map[string]*poolSuspended // by pool id; fixed after newSuspendedWorkers
}

// poolSuspended is one pool's suspended workers.
type poolSuspended struct {
	n  atomic.Int32 // len(ws), readable without mu
	mu sync.Mutex
	ws map[*workerRec]struct{}
}

func newSuspendedWorkers(p *Placer) suspendedWorkers {
	sw := suspendedWorkers{pools: make(map[string]*poolSuspended, len(p.order))}
	for _, sl := range p.order {
		sw.pools[sl.info.ID] = &poolSuspended{ws: map[*workerRec]struct{}{}}
	}
	return sw
}

// add records w as suspended on its pool.
func (sw suspendedWorkers) add(w *workerRec) {
	ps := sw.pools[w.res.PoolID()]
	ps.mu.Lock()
	if _, ok := ps.ws[w]; !ok {
		ps.ws[w] = struct{}{}
		ps.n.Add(1)
	}
	ps.mu.Unlock()
}

// remove takes w out of its pool's set and reports whether it was there (false: another
// goroutine took it first, to resume or reclaim it).
func (sw suspendedWorkers) remove(w *workerRec) bool {
	ps := sw.pools[w.res.PoolID()]
	if ps.n.Load() == 0 {
		return false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if _, ok := ps.ws[w]; !ok {
		return false
	}
	delete(ps.ws, w)
	ps.n.Add(-1)
	return true
}

// reclaimable takes out of the sets, and returns, the suspended worker on one of pools to stop
// first: FLASHBOOT workers before PRIORITY_FLASHBOOT ones, the longest suspended first; nil
// when those pools have none.
func (sw suspendedWorkers) reclaimable(pools []string) *workerRec {
	for {
		var best *workerRec
		for _, id := range pools {
			ps := sw.pools[id]
			if ps == nil || ps.n.Load() == 0 {
				continue
			}
			ps.mu.Lock()
			for w := range ps.ws {
				if best == nil || (best.pinned && !w.pinned) || (best.pinned == w.pinned && w.susAt.Before(best.susAt)) {
					best = w
				}
			}
			ps.mu.Unlock()
		}
		if best == nil || sw.remove(best) {
			return best
		}
		// Resumed or reclaimed by another goroutine between the look and the take: look again.
	}
}
