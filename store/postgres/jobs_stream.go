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
		SELECT (SELECT coalesce(sum(size), 0) FROM gantry_job_chunks WHERE job_id = $1 AND NOT delivered)
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

// DrainChunks hands out the job's unread chunks once; see core.JobStore. They are marked
// delivered, and the delivered ones past core.MaxStreamKept bytes or core.MaxStreamKeptParts
// chunks (newest kept) are deleted.
func (s *Jobs) DrainChunks(ctx context.Context, id string) ([]core.StreamChunk, error) {
	out, err := s.chunks(ctx, `WITH gone AS (UPDATE gantry_job_chunks SET delivered = true
		WHERE job_id = $1 AND NOT delivered RETURNING n, output, metrics)
		SELECT n, output, metrics FROM gone ORDER BY n`, id)
	if err != nil {
		return nil, fmt.Errorf("postgres: draining job %s's stream: %w", id, err)
	}
	if len(out) == 0 {
		if _, _, err := s.read(ctx, id); err != nil {
			return nil, err
		}
		return nil, nil
	}
	// A statement does not see its own changes: the trim is a second one.
	_, err = s.db.Pool.Exec(ctx, `DELETE FROM gantry_job_chunks WHERE n IN (
		SELECT n FROM (SELECT n, sum(size) OVER (ORDER BY n DESC) AS upto, row_number() OVER (ORDER BY n DESC) AS r
			FROM gantry_job_chunks WHERE job_id = $1 AND delivered) t
		WHERE (upto > $2 OR r > $3) AND r > 1)`, id, core.MaxStreamKept, core.MaxStreamKeptParts)
	if err != nil {
		return nil, fmt.Errorf("postgres: trimming job %s's delivered stream: %w", id, err)
	}
	return out, nil
}

// PeekChunks returns the job's chunks after a Seq, delivered and not; see core.JobStore.
func (s *Jobs) PeekChunks(ctx context.Context, id string, after int64) ([]core.StreamChunk, error) {
	out, err := s.chunks(ctx, `SELECT n, output, metrics FROM gantry_job_chunks
		WHERE job_id = $1 AND n > $2 ORDER BY n`, id, after)
	if err != nil {
		return nil, fmt.Errorf("postgres: reading job %s's stream: %w", id, err)
	}
	return out, nil
}

// chunks runs a query answering rows of (n, output, metrics).
func (s *Jobs) chunks(ctx context.Context, sql string, args ...any) ([]core.StreamChunk, error) {
	rows, err := s.db.Pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	var out []core.StreamChunk
	err = scanAll(rows, func(r pgx.Rows) error {
		var c core.StreamChunk
		var o, m []byte
		if err := r.Scan(&c.Seq, &o, &m); err != nil {
			return err
		}
		c.Output = o
		if m != nil {
			c.Metrics = m
		}
		out = append(out, c)
		return nil
	})
	return out, err
}
