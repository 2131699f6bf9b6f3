package memq

import (
	"context"
	"sync"
	"time"

	"github.com/gantryhq/gantry/core"
)

// workers is which worker holds which job, and when each was last heard from.
type workers struct {
	mu   sync.Mutex
	seen map[string]int64                    // worker -> last heartbeat, Unix nanoseconds
	held map[string]map[core.JobKey]struct{} // worker -> the running jobs it holds
}

func (w *workers) init() {
	w.seen = map[string]int64{}
	w.held = map[string]map[core.JobKey]struct{}{}
}

// take records that worker holds the job, heard from at now.
func (w *workers) take(worker string, k core.JobKey, now int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.held[worker]
	if h == nil {
		h = map[core.JobKey]struct{}{}
		w.held[worker] = h
	}
	h[k] = struct{}{}
	w.seen[worker] = max(w.seen[worker], now)
}

// beat records that worker was heard from at now.
func (w *workers) beat(worker string, now int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen[worker] = max(w.seen[worker], now)
}

// release records that worker no longer holds the job.
func (w *workers) release(worker string, k core.JobKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.held[worker]; h != nil {
		delete(h, k) // an empty set stays, ready for the worker's next job (ForgetWorker drops it)
	}
}

// Held returns the jobs the worker holds; see core.JobStore.
func (s *Store) Held(ctx context.Context, worker string) ([]string, error) {
	s.workers.mu.Lock()
	defer s.workers.mu.Unlock()
	var ids []string
	for k := range s.workers.held[worker] {
		ids = append(ids, k.String())
	}
	return ids, nil
}

// Heartbeat records that the worker was alive at; see core.JobStore.
func (s *Store) Heartbeat(ctx context.Context, worker string, at time.Time) error {
	s.workers.beat(worker, at.UnixNano())
	return nil
}

// Silent returns the workers holding jobs not heard from since before; see core.JobStore.
func (s *Store) Silent(ctx context.Context, before time.Time) ([]string, error) {
	s.workers.mu.Lock()
	defer s.workers.mu.Unlock()
	var out []string
	for worker, held := range s.workers.held {
		if len(held) > 0 && s.workers.seen[worker] < before.UnixNano() {
			out = append(out, worker)
		}
	}
	return out, nil
}

// ForgetWorker drops the worker's heartbeat (and its empty holdings); see core.JobStore.
func (s *Store) ForgetWorker(ctx context.Context, worker string) error {
	s.workers.mu.Lock()
	defer s.workers.mu.Unlock()
	delete(s.workers.seen, worker)
	if len(s.workers.held[worker]) == 0 {
		delete(s.workers.held, worker)
	}
	return nil
}
