package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/gantryhq/gantry/core"
)

// AppendChunks adds stream chunks to a running job the worker holds; see core.JobStore. One
// statement checks the holder, marks the job streamed and stores the chunks.
func (s *Jobs) AppendChunks(ctx context.Context, id, worker string, chunks []core.StreamChunk) (int, error) {
	outs := make([][]byte, len(chunks))
	metrics := make([][]byte, len(chunks))
	size, added := make([]int32, len(chunks)), 0
	for i, c := range chunks {
		outs[i] = c.Output
		if outs[i] == nil {
			outs[i] = []byte{}
		}
		if c.Metrics != nil {
			metrics[i] = c.Metrics
		}
		size[i] = int32(len(c.Output) + len(c.Metrics))
		added += int(size[i])
	}
	var unread *int64
	err := s.db.Pool.QueryRow(ctx, `WITH job AS (
			UPDATE gantry_jobs SET streamed = true, rev = rev + 1
			WHERE id = $1 AND status = 'IN_PROGRESS' AND worker_id = $2 RETURNING id),
		ins AS (INSERT INTO gantry_job_chunks (job_id, output, metrics, size)
			SELECT job.id, c.output, c.metrics, c.size FROM job,
				unnest($3::bytea[], $4::bytea[], $5::int[]) WITH ORDINALITY AS c(output, metrics, size, i)
			ORDER BY c.i)
		SELECT (SELECT coalesce(sum(size), 0) FROM gantry_job_chunks WHERE job_id = $1)
		FROM job`, id, worker, outs, metrics, size).Scan(&unread)
	if errors.Is(err, pgx.ErrNoRows) {
		j, err := s.Get(ctx, id)
		if err != nil {
			return 0, err
		}
		return 0, &core.StateError{ID: id, Status: j.Status}
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: appending to job %s's stream: %w", id, err)
	}
	s.running.drop(id) // its revision moved on
	s.jobChanged(id)
	// The statement's snapshot does not see the chunks it adds.
	return int(*unread) + added, nil
}

// DrainChunks hands out the job's unread chunks once; see core.JobStore.
func (s *Jobs) DrainChunks(ctx context.Context, id string) ([]core.StreamChunk, error) {
	rows, err := s.db.Pool.Query(ctx, `WITH gone AS (DELETE FROM gantry_job_chunks WHERE job_id = $1
		RETURNING n, output, metrics) SELECT output, metrics FROM gone ORDER BY n`, id)
	if err != nil {
		return nil, fmt.Errorf("postgres: draining job %s's stream: %w", id, err)
	}
	var out []core.StreamChunk
	err = scanAll(rows, func(r pgx.Rows) error {
		var c core.StreamChunk
		var o, m []byte
		if err := r.Scan(&o, &m); err != nil {
			return err
		}
		c.Output = o
		if m != nil {
			c.Metrics = m
		}
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: draining job %s's stream: %w", id, err)
	}
	if len(out) == 0 {
		if _, _, err := s.read(ctx, id); err != nil {
			return nil, err
		}
	}
	return out, nil
}
