package scheduler

import (
	"slices"
	"sync"

	"github.com/gantryhq/gantry/pool"
)

// This file spreads the queue workers this scheduler starts over the replicas sharing its
// store (Config.Replicas): each worker polls, posts and pings the replica whose URL it was
// given, so that the replicas share the workers' takes and results instead of the leader
// answering them all. A worker whose replica leaves the roster is stopped, and the autoscaler
// starts its replacement on a replica still there.

// ReplicaURLs is where the workers may reach Gantry: every live replica (leader.Roster).
type ReplicaURLs interface {
	// URLs returns the live replicas' base URLs, this replica's own among them, and a version
	// that changes whenever they do.
	URLs() ([]string, uint64)
}

// baseCounts counts the live queue workers given each base URL.
type baseCounts struct {
	mu sync.Mutex
	n  map[string]int
}

// workerBase returns the base URL the next queue worker of pl reaches Gantry at, and whether
// it was spread (counted until releaseBase): the live replica with the fewest of this
// scheduler's workers (the first, sorted, of those tied), so that a replica that joins gets
// the next workers started. Alone, or for a pool whose workers reach Gantry at a URL of its
// own (pool.WorkerURLOwner), it is Config.BaseURL.
func (s *Scheduler) workerBase(pl pool.Pool) (string, bool) {
	if s.cfg.Replicas == nil {
		return s.cfg.BaseURL, false
	}
	if o, ok := pl.(pool.WorkerURLOwner); ok && o.OwnsWorkerURL() {
		return s.cfg.BaseURL, false
	}
	urls, _ := s.cfg.Replicas.URLs()
	if len(urls) == 0 {
		return s.cfg.BaseURL, false
	}
	b := &s.bases
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == nil {
		b.n = map[string]int{}
	}
	best := urls[0]
	for _, u := range urls[1:] {
		if b.n[u] < b.n[best] {
			best = u
		}
	}
	b.n[best]++
	return best, true
}

// releaseBase stops counting a spread worker that is gone.
func (s *Scheduler) releaseBase(w *workerRec) {
	if !w.spread {
		return
	}
	b := &s.bases
	b.mu.Lock()
	defer b.mu.Unlock()
	if n, ok := b.n[w.base]; ok {
		if n <= 1 {
			delete(b.n, w.base)
		} else {
			b.n[w.base] = n - 1
		}
	}
}

// checkReplicas stops the workers sent to a replica that left the roster, once per change of
// the roster: their polls and results would go nowhere, and an idle one would wait there for
// ever. Their jobs go back to the queue by the worker-lost rule (ForgetWorker at their exit).
func (s *Scheduler) checkReplicas() {
	if s.cfg.Replicas == nil {
		return
	}
	urls, ver := s.cfg.Replicas.URLs()
	if ver == s.replicasSeen.Load() {
		return
	}
	s.replicasSeen.Store(ver)
	p := s.list.Load()
	if p == nil {
		return
	}
	for _, es := range *p {
		es.mu.Lock()
		for _, w := range es.workers {
			if w.spread && w.state != phaseStopping && !slices.Contains(urls, w.base) {
				s.stopLocked(w, "its replica ("+w.base+") left the roster")
			}
		}
		es.mu.Unlock()
	}
}
