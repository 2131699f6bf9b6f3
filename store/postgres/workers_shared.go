package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gantryhq/gantry/core"
)

// This file is core.SharedWorkers: what replicas tell each other about workers
// (migrations/0013_worker_notes.sql).

var _ core.SharedWorkers = (*Jobs)(nil)

// NoteWorker records what this replica heard from a worker it did not register; see
// core.SharedWorkers. One upsert.
func (s *Jobs) NoteWorker(ctx context.Context, worker string, n core.WorkerNote, at time.Time) error {
	polls := 0
	var polledAt *time.Time
	if n.Polled {
		polls, polledAt = 1, &at
	}
	_, err := s.db.Pool.Exec(ctx, `INSERT INTO gantry_worker_notes AS n (worker, polls, polled_at, stop_pod, unhealthy, heard)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (worker) DO UPDATE SET polls = n.polls + excluded.polls,
			polled_at = coalesce(greatest(n.polled_at, excluded.polled_at), n.polled_at, excluded.polled_at),
			stop_pod = n.stop_pod OR excluded.stop_pod,
			unhealthy = CASE WHEN excluded.unhealthy <> '' THEN excluded.unhealthy ELSE n.unhealthy END,
			heard = greatest(n.heard, excluded.heard)`,
		worker, polls, polledAt, n.StopPod, n.Unhealthy, at)
	if err != nil {
		return fmt.Errorf("postgres: noting worker %s: %w", worker, err)
	}
	return nil
}

// SharedActivity returns what the store knows of the noted ones of workers; see
// core.SharedWorkers. One query: the notes, with each worker's running jobs (by the running
// jobs' index) and heartbeat.
func (s *Jobs) SharedActivity(ctx context.Context, workers []string) ([]core.SharedActivity, error) {
	rows, err := s.db.Pool.Query(ctx, `SELECT n.worker, n.polls, n.polled_at, n.stop_pod, n.unhealthy, h.seen,
			ARRAY(SELECT j.id FROM gantry_jobs j WHERE j.worker_id = n.worker AND j.status = 'IN_PROGRESS')
		FROM gantry_worker_notes n LEFT JOIN gantry_job_heartbeats h ON h.worker = n.worker
		WHERE n.worker = ANY($1)`, workers)
	if err != nil {
		return nil, fmt.Errorf("postgres: reading shared worker activity: %w", err)
	}
	var out []core.SharedActivity
	for rows.Next() {
		var a core.SharedActivity
		var polledAt, seen *time.Time
		if err := rows.Scan(&a.Worker, &a.Polls, &polledAt, &a.StopPod, &a.Unhealthy, &seen, &a.Held); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: reading shared worker activity: %w", err)
		}
		if polledAt != nil {
			a.PolledAt = *polledAt
		}
		if seen != nil {
			a.Seen = *seen
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: reading shared worker activity: %w", err)
	}
	return out, nil
}

// PublishFigures stores the leader's worker figures; see core.SharedWorkers. One statement,
// whatever the number of endpoints; the row whose endpoint is empty records the epoch.
func (s *Jobs) PublishFigures(ctx context.Context, epoch int64, figures map[string]core.WorkerFigures) error {
	eps := make([]string, 0, len(figures)+1)
	bodies := make([]string, 0, len(figures)+1)
	eps, bodies = append(eps, ""), append(bodies, "{}")
	for ep, f := range figures {
		if ep == "" {
			continue
		}
		b, err := json.Marshal(f)
		if err != nil {
			return fmt.Errorf("postgres: encoding worker figures of %s: %w", ep, err)
		}
		eps, bodies = append(eps, ep), append(bodies, string(b))
	}
	_, err := s.db.Pool.Exec(ctx, `INSERT INTO gantry_worker_figures AS f (endpoint, epoch, body)
		SELECT e, $1, b::jsonb FROM unnest($2::text[], $3::text[]) AS u(e, b)
		ON CONFLICT (endpoint) DO UPDATE SET epoch = excluded.epoch, body = excluded.body
			WHERE f.epoch <= excluded.epoch`, epoch, eps, bodies)
	if err != nil {
		return fmt.Errorf("postgres: publishing worker figures: %w", err)
	}
	return nil
}

// ReadFigures returns the newest epoch's worker figures; see core.SharedWorkers.
func (s *Jobs) ReadFigures(ctx context.Context) (map[string]core.WorkerFigures, error) {
	rows, err := s.db.Pool.Query(ctx, `SELECT endpoint, body FROM gantry_worker_figures
		WHERE endpoint <> '' AND epoch = (SELECT max(epoch) FROM gantry_worker_figures)`)
	if err != nil {
		return nil, fmt.Errorf("postgres: reading worker figures: %w", err)
	}
	out := map[string]core.WorkerFigures{}
	var ep string
	var body []byte
	_, err = pgx.ForEachRow(rows, []any{&ep, &body}, func() error {
		var f core.WorkerFigures
		if err := json.Unmarshal(body, &f); err != nil {
			return fmt.Errorf("endpoint %s: %w", ep, err)
		}
		out[ep] = f
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: reading worker figures: %w", err)
	}
	return out, nil
}
