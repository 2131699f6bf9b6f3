package core

import (
	"hash/maphash"
	"sync"
)

// workerShards is how many locks the worker registry is split over. Every job a worker runs
// takes its worker's lock a few times (the poll, the take, the poll's end, the result). With
// one lock for every worker, thousands of workers queued on it under load, the Go mutex turned
// to its starvation mode (handing the lock over goroutine by goroutine, each waiting for a CPU),
// and every job's take and post slowed: the autoscaler read the longer waits as load and
// started more workers, which made it worse.
const workerShards = 64

// workerRegistry is the workers this engine registered, by id, split over shards. A shard's lock
// guards its map and every field of its workers' workerState but the atomic activity mirror.
// Lock order: one shard's lock at a time; a store's locks may be taken under it, never the
// reverse.
type workerRegistry struct {
	seed   maphash.Seed
	shards [workerShards]workerShard
}

// workerShard is a part of the registry.
type workerShard struct {
	mu      sync.Mutex
	takes   sync.Cond // on mu: broadcast when a Take call of one of its workers ends
	workers map[string]*workerState
}

func (r *workerRegistry) init() {
	r.seed = maphash.MakeSeed()
	for i := range r.shards {
		sh := &r.shards[i]
		sh.workers = map[string]*workerState{}
		sh.takes.L = &sh.mu
	}
}

// shard returns the shard a worker id belongs to.
func (r *workerRegistry) shard(worker string) *workerShard {
	return &r.shards[maphash.String(r.seed, worker)%workerShards]
}

// lock locks the worker's shard and returns it with the worker, nil when it is not registered;
// the caller unlocks sh.mu.
func (r *workerRegistry) lock(worker string) (sh *workerShard, w *workerState) {
	sh = r.shard(worker)
	sh.mu.Lock()
	return sh, sh.workers[worker]
}

// known reports whether the worker is registered.
func (r *workerRegistry) known(worker string) bool {
	sh, w := r.lock(worker)
	sh.mu.Unlock()
	return w != nil
}

// each calls fn for every registered worker, a shard at a time with its lock held.
func (r *workerRegistry) each(fn func(w *workerState)) {
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		for _, w := range sh.workers {
			fn(w)
		}
		sh.mu.Unlock()
	}
}

// len returns how many workers are registered.
func (r *workerRegistry) len() int {
	n := 0
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		n += len(sh.workers)
		sh.mu.Unlock()
	}
	return n
}
