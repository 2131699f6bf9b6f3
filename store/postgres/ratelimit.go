package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gantryhq/gantry/core"
)

// RateLimits is core.RateLimits on PostgreSQL: a user's windows are one row that every replica
// counts in, so a user's quota is one quota however requests spread over replicas. A check is
// one statement, one round trip: an upsert that counts the request only if every window has
// room (the row lock orders concurrent checks), returning the windows' counts.
type RateLimits struct{ db *DB }

// RateLimits returns the rate-limit windows kept in db.
func (db *DB) RateLimits() *RateLimits { return &RateLimits{db} }

// rateWindows are the window lengths in seconds, in the order of the row's columns.
var rateWindows = [3]struct {
	name   string
	length int64
}{{"minute", 60}, {"hour", 3600}, {"day", 86400}}

// rateSQL counts a request ($1 user; $2, $3, $4 the current windows' starts; $5, $6, $7 their
// quotas, 0 = unlimited and not counted). A window whose stored start is not the current one
// has ended: its count starts again. The first part returns the counts after counting; when
// the update's WHERE refuses (a window is used up), the second returns the counts as they
// stand, so that a refusal counts nothing.
const rateSQL = `WITH up AS (
	INSERT INTO gantry_rate_limits AS r (user_name, m_start, m_used, h_start, h_used, d_start, d_used)
	VALUES ($1, $2, ($5 > 0)::int, $3, ($6 > 0)::int, $4, ($7 > 0)::int)
	ON CONFLICT (user_name) DO UPDATE SET
		m_start = $2, m_used = CASE WHEN r.m_start = $2 THEN r.m_used ELSE 0 END + ($5 > 0)::int,
		h_start = $3, h_used = CASE WHEN r.h_start = $3 THEN r.h_used ELSE 0 END + ($6 > 0)::int,
		d_start = $4, d_used = CASE WHEN r.d_start = $4 THEN r.d_used ELSE 0 END + ($7 > 0)::int
	WHERE ($5 = 0 OR r.m_start <> $2 OR r.m_used < $5)
	  AND ($6 = 0 OR r.h_start <> $3 OR r.h_used < $6)
	  AND ($7 = 0 OR r.d_start <> $4 OR r.d_used < $7)
	RETURNING true, m_start, m_used, h_start, h_used, d_start, d_used)
SELECT * FROM up
UNION ALL
SELECT false, m_start, m_used, h_start, h_used, d_start, d_used FROM gantry_rate_limits
WHERE user_name = $1 AND NOT EXISTS (SELECT 1 FROM up)`

// Allow counts one request of user against quota at now, unless a window is used up.
func (l *RateLimits) Allow(ctx context.Context, user string, q core.Quota, now time.Time) (core.Decision, error) {
	if err := ctx.Err(); err != nil {
		return core.Decision{}, err
	}
	quotas := [3]int{q.Minute, q.Hour, q.Day}
	if quotas == [3]int{} {
		return core.Decision{Allowed: true}, nil
	}
	sec := now.Unix()
	var starts [3]int64
	for i, w := range rateWindows {
		starts[i] = sec - sec%w.length
	}
	var (
		allowed bool
		start   [3]int64
		used    [3]int
	)
	dest := []any{&allowed, &start[0], &used[0], &start[1], &used[1], &start[2], &used[2]}
	args := []any{user, starts[0], starts[1], starts[2], quotas[0], quotas[1], quotas[2]}
	err := l.db.q(ctx).QueryRow(ctx, rateSQL, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !allowed && !exhausted(starts, quotas, start, used)) {
		// Refused on a row changed after this statement's snapshot: read it as it is now.
		err = l.db.q(ctx).QueryRow(ctx, `SELECT false, m_start, m_used, h_start, h_used, d_start, d_used
			FROM gantry_rate_limits WHERE user_name = $1`, user).Scan(dest...)
	}
	if err != nil {
		return core.Decision{}, fmt.Errorf("counting a request of %s against its rate limits: %w", user, err)
	}
	d := core.Decision{Allowed: allowed}
	for i, w := range rateWindows {
		if start[i] != starts[i] {
			used[i] = 0 // an ended window, as it stood
		}
		reset := starts[i] + w.length - sec
		// Of several exhausted windows, name the one that resets last: retrying any sooner fails.
		if !allowed && quotas[i] > 0 && used[i] >= quotas[i] && (d.Exceeded == "" || reset > d.RetryAfter) {
			d.Exceeded, d.RetryAfter = w.name, reset
		}
		if quotas[i] > 0 {
			d.Windows = append(d.Windows, core.Window{Name: w.name, Length: w.length, Quota: quotas[i],
				Remaining: max(quotas[i]-used[i], 0), Reset: reset})
		}
	}
	return d, nil
}

// exhausted reports whether a limited window, still current, is used up.
func exhausted(starts [3]int64, quotas [3]int, start [3]int64, used [3]int) bool {
	for i := range quotas {
		if quotas[i] > 0 && start[i] == starts[i] && used[i] >= quotas[i] {
			return true
		}
	}
	return false
}

var _ core.RateLimits = (*RateLimits)(nil)
