package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gantryhq/gantry/core"
)

// addHistory adds a record's counts to its row; the histograms add element by element.
const addHistory = `INSERT INTO gantry_history AS h (endpoint, minute, completed, failed, timed_out, cancelled,
		delay_sum_ms, exec_sum_ms, delay_hist, exec_hist) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
	ON CONFLICT (endpoint, minute) DO UPDATE SET
		completed = h.completed + excluded.completed, failed = h.failed + excluded.failed,
		timed_out = h.timed_out + excluded.timed_out, cancelled = h.cancelled + excluded.cancelled,
		delay_sum_ms = h.delay_sum_ms + excluded.delay_sum_ms, exec_sum_ms = h.exec_sum_ms + excluded.exec_sum_ms,
		delay_hist = (SELECT array_agg(a + b ORDER BY i) FROM unnest(h.delay_hist, excluded.delay_hist) WITH ORDINALITY AS u(a, b, i)),
		exec_hist = (SELECT array_agg(a + b ORDER BY i) FROM unnest(h.exec_hist, excluded.exec_hist) WITH ORDINALITY AS u(a, b, i))`

// AddHistory adds each record's counts to its endpoint's row of the minute, in one batch
// (one implicit transaction: all or none). Concurrent adds from other replicas wait on the
// row and add up.
func (db *DB) AddHistory(ctx context.Context, recs []core.HistoryRecord) error {
	if len(recs) == 0 {
		return ctx.Err()
	}
	b := &pgx.Batch{}
	for _, r := range recs {
		c := &r.Counts
		b.Queue(addHistory, r.Endpoint, r.At.UTC().Truncate(time.Minute), c.Completed, c.Failed, c.TimedOut, c.Cancelled,
			c.DelaySumMs, c.ExecSumMs, c.Delay[:], c.Exec[:])
	}
	if err := db.Pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("adding history: %w", err)
	}
	return nil
}

// ScanHistory returns the endpoint's rows of the minutes in [from, to), oldest first.
func (db *DB) ScanHistory(ctx context.Context, endpoint string, from, to time.Time) ([]core.HistoryRecord, error) {
	rows, err := db.q(ctx).Query(ctx, `SELECT minute, completed, failed, timed_out, cancelled, delay_sum_ms, exec_sum_ms,
			delay_hist, exec_hist FROM gantry_history WHERE endpoint = $1 AND minute >= $2 AND minute < $3 ORDER BY minute`,
		endpoint, from, to)
	if err != nil {
		return nil, fmt.Errorf("reading the history of %s: %w", endpoint, err)
	}
	defer rows.Close()
	var out []core.HistoryRecord
	for rows.Next() {
		r := core.HistoryRecord{Endpoint: endpoint}
		c := &r.Counts
		var delay, exec []int64
		if err := rows.Scan(&r.At, &c.Completed, &c.Failed, &c.TimedOut, &c.Cancelled, &c.DelaySumMs, &c.ExecSumMs,
			&delay, &exec); err != nil {
			return nil, fmt.Errorf("reading the history of %s: %w", endpoint, err)
		}
		copy(c.Delay[:], delay)
		copy(c.Exec[:], exec)
		r.At = r.At.UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the history of %s: %w", endpoint, err)
	}
	return out, nil
}

// TrimHistory deletes the rows of minutes before before.
func (db *DB) TrimHistory(ctx context.Context, before time.Time) error {
	if _, err := db.q(ctx).Exec(ctx, `DELETE FROM gantry_history WHERE minute < $1`, before); err != nil {
		return fmt.Errorf("trimming history: %w", err)
	}
	return nil
}

var _ core.HistoryStore = (*DB)(nil)
