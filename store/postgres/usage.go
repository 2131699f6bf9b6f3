package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gantryhq/gantry/core"
)

// AddUsage stores u unless the job already has a record, committed before it returns. One
// statement: the insert, or else the record already there.
func (db *DB) AddUsage(ctx context.Context, u core.Usage) (core.Usage, bool, error) {
	body, err := json.Marshal(u)
	if err != nil {
		return core.Usage{}, false, err
	}
	// The insert's RETURNING row says it was added; otherwise the existing row is read. A
	// concurrent add of the same job waits on the primary key, so the read sees the winner.
	var kept []byte
	var added bool
	err = db.q(ctx).QueryRow(ctx, `WITH ins AS (
			INSERT INTO gantry_usage (job_id, owner, at, body) VALUES ($1, $2, $3, $4)
			ON CONFLICT (job_id) DO NOTHING RETURNING body)
		SELECT body, true FROM ins
		UNION ALL SELECT body, false FROM gantry_usage WHERE job_id = $1 AND NOT EXISTS (SELECT 1 FROM ins)`,
		u.JobID, u.Owner, u.At, body).Scan(&kept, &added)
	if errors.Is(err, pgx.ErrNoRows) {
		// The conflicting row was committed after this statement's snapshot: read it now.
		err = db.q(ctx).QueryRow(ctx, `SELECT body, false FROM gantry_usage WHERE job_id = $1`, u.JobID).Scan(&kept, &added)
	}
	if err != nil {
		return core.Usage{}, false, fmt.Errorf("recording the usage of job %s: %w", u.JobID, err)
	}
	if added {
		return u, true, nil
	}
	var old core.Usage
	if err := json.Unmarshal(kept, &old); err != nil {
		return core.Usage{}, false, fmt.Errorf("decoding the usage of job %s: %w", u.JobID, err)
	}
	return old, false, nil
}

// ScanUsage calls fn with the owner's records completed in [from, to), oldest first. It stops
// with ctx's error once ctx is done.
func (db *DB) ScanUsage(ctx context.Context, owner string, from, to time.Time, fn func(core.Usage) bool) error {
	// Stored times have microseconds; a bound between two microseconds rounds up, which keeps
	// [from, to) exact.
	rows, err := db.q(ctx).Query(ctx, `SELECT body FROM gantry_usage
		WHERE owner = $1 AND ($2::boolean OR at >= $3) AND ($4::boolean OR at < $5)
		ORDER BY at, job_id`, owner, from.IsZero(), ceilMicro(from), to.IsZero(), ceilMicro(to))
	if err != nil {
		return fmt.Errorf("reading the usage of %s: %w", owner, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return fmt.Errorf("reading the usage of %s: %w", owner, err)
		}
		var u core.Usage
		if err := json.Unmarshal(body, &u); err != nil {
			return fmt.Errorf("decoding a usage record of %s: %w", owner, err)
		}
		if !fn(u) {
			return nil
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the usage of %s: %w", owner, err)
	}
	return nil
}

// ceilMicro rounds t up to a whole microsecond.
func ceilMicro(t time.Time) time.Time {
	if r := t.Truncate(time.Microsecond); !r.Equal(t) {
		return r.Add(time.Microsecond)
	}
	return t
}

var _ core.UsageStore = (*DB)(nil)
