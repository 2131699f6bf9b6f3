package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// beatEvery is how often a worker's takes record its heartbeat: the stored heartbeat lags the
// last take by at most this, far below the time after which a silent worker is lost.
const beatEvery = 5 * time.Second

// beats remembers when this store last wrote each worker's heartbeat.
type beats struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (b *beats) init() { b.last = map[string]time.Time{} }

// due reports whether a take by worker at now should write its heartbeat.
func (b *beats) due(worker string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	last, ok := b.last[worker]
	return !ok || now.Sub(last) >= beatEvery || now.Before(last)
}

func (b *beats) beaten(worker string, now time.Time) {
	b.mu.Lock()
	b.last[worker] = now
	b.mu.Unlock()
}

func (b *beats) forget(worker string) {
	b.mu.Lock()
	delete(b.last, worker)
	b.mu.Unlock()
}

// Held returns the running jobs the worker holds; see core.JobStore.
func (s *Jobs) Held(ctx context.Context, worker string) ([]string, error) {
	rows, err := s.db.Pool.Query(ctx, `SELECT id FROM gantry_jobs WHERE worker_id = $1 AND status = 'IN_PROGRESS'`, worker)
	if err != nil {
		return nil, fmt.Errorf("postgres: reading worker %s's jobs: %w", worker, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: reading worker %s's jobs: %w", worker, err)
	}
	return ids, nil
}

// Heartbeat records that the worker was alive at; see core.JobStore.
func (s *Jobs) Heartbeat(ctx context.Context, worker string, at time.Time) error {
	_, err := s.db.Pool.Exec(ctx, `INSERT INTO gantry_job_heartbeats (worker, seen) VALUES ($1, $2)
		ON CONFLICT (worker) DO UPDATE SET seen = greatest(gantry_job_heartbeats.seen, excluded.seen)`, worker, at)
	if err != nil {
		return fmt.Errorf("postgres: recording worker %s's heartbeat: %w", worker, err)
	}
	s.beats.beaten(worker, at)
	return nil
}

// Silent returns the workers holding jobs whose last heartbeat is before before; see
// core.JobStore.
func (s *Jobs) Silent(ctx context.Context, before time.Time) ([]string, error) {
	rows, err := s.db.Pool.Query(ctx, `SELECT DISTINCT j.worker_id FROM gantry_jobs j
		LEFT JOIN gantry_job_heartbeats h ON h.worker = j.worker_id
		WHERE j.status = 'IN_PROGRESS' AND (h.seen IS NULL OR h.seen < $1)`, before)
	if err != nil {
		return nil, fmt.Errorf("postgres: finding silent workers: %w", err)
	}
	ws, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: finding silent workers: %w", err)
	}
	return ws, nil
}

// ForgetWorker drops the worker's heartbeat, and what other replicas noted of it
// (workers_shared.go); see core.JobStore.
func (s *Jobs) ForgetWorker(ctx context.Context, worker string) error {
	if _, err := s.db.Pool.Exec(ctx, `WITH notes AS (DELETE FROM gantry_worker_notes WHERE worker = $1)
		DELETE FROM gantry_job_heartbeats WHERE worker = $1`, worker); err != nil {
		return fmt.Errorf("postgres: forgetting worker %s: %w", worker, err)
	}
	s.beats.forget(worker)
	return nil
}
