package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gantryhq/gantry/core"
)

// List returns jobs newest first; see core.JobStore. The cursor is the last Seq handed out.
//
// A page of an endpoint's jobs reads the (endpoint, seq) index of each table backwards from
// its cursor, the two merged in seq order, and stops at the page's end (one job more, to know
// whether another page follows); a page of one user's jobs on a shared endpoint reads the
// (endpoint, owner, seq) ones (migration 0016). Other endpoints' and other users' jobs are
// never read: a page costs its own jobs, and those of its endpoint (or owner) that a status
// filter passes over.
func (s *Jobs) List(ctx context.Context, f core.JobFilter) ([]core.Job, string, error) {
	sql, args, err := listQuery(f)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.db.Pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("postgres: listing jobs: %w", err)
	}
	var out []core.Job
	err = scanAll(rows, func(r pgx.Rows) error {
		x, err := scanRow(r)
		out = append(out, x.job)
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("postgres: listing jobs: %w", err)
	}
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
		return out, strconv.FormatUint(out[len(out)-1].Seq, 10), nil
	}
	return out, "", nil
}

// listQuery returns List's statement for the filter, and its arguments.
func listQuery(f core.JobFilter) (string, []any, error) {
	var conds []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Cursor != "" {
		n, err := strconv.ParseInt(f.Cursor, 10, 64)
		if err != nil || n <= 0 {
			return "", nil, fmt.Errorf("postgres: cursor %q: %w", f.Cursor, core.ErrBadCursor)
		}
		conds = append(conds, "seq < "+arg(n))
	}
	if f.Endpoint != "" {
		conds = append(conds, "endpoint = "+arg(f.Endpoint))
	}
	if f.Owner != "" {
		conds = append(conds, "owner = "+arg(f.Owner))
	}
	if f.Status != 0 {
		conds = append(conds, "status = ANY("+arg(statusNames(f.Status))+")")
	}
	if f.WebhookPending {
		conds = append(conds, "webhook_pending")
	}
	where := ""
	if len(conds) > 0 {
		where = " AND " + strings.Join(conds, " AND ")
	}
	// Each table's part is limited to the page too, so that each reads its list index
	// backwards and stops there, whatever the planner guesses of the horizon or the cursor.
	limit := ""
	if f.Limit > 0 {
		limit = " ORDER BY seq DESC LIMIT " + arg(f.Limit+1)
	}
	// A table whose jobs the status filter cannot match is not read: a list of ended jobs
	// does not pass over the endpoint's queue, nor a list of queued ones over its history.
	live := f.Status == 0 || f.Status.Has(core.InQueue) || f.Status.Has(core.InProgress)
	ended := f.Status == 0 || f.Status.Has(core.Completed) || f.Status.Has(core.Failed) ||
		f.Status.Has(core.Cancelled) || f.Status.Has(core.TimedOut)
	var parts []string
	if live {
		parts = append(parts, `(SELECT `+jobCols+` FROM gantry_jobs WHERE true`+where+limit+`)`)
	}
	if ended || !live {
		parts = append(parts, `(SELECT `+jobCols+` FROM gantry_jobs_ended WHERE expires_at > `+horizon+where+limit+`)`)
	}
	if limit == "" {
		limit = " ORDER BY seq DESC"
	}
	return `SELECT * FROM (` + strings.Join(parts, " UNION ALL ") + `) j` + limit, args, nil
}

// Purge applies change to the endpoint's queued jobs; see core.JobStore. It locks them (passing
// over those a take holds this moment), changes them in Go, and moves them all to the ended
// table in one round trip, in one transaction.
func (s *Jobs) Purge(ctx context.Context, endpoint, owner string, change func(*core.Job), durable bool) (int, error) {
	tx, err := s.db.Pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("postgres: purging %s: %w", endpoint, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit, a no-op
	if !durable {
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
			return 0, err
		}
	}
	rows, err := tx.Query(ctx, `SELECT `+jobCols+` FROM gantry_jobs WHERE endpoint = $1 AND status = 'IN_QUEUE'
		AND ($2 = '' OR owner = $2) FOR UPDATE SKIP LOCKED`, endpoint, owner)
	if err != nil {
		return 0, fmt.Errorf("postgres: purging %s: %w", endpoint, err)
	}
	var found []row
	err = scanAll(rows, func(r pgx.Rows) error {
		x, err := scanRow(r)
		found = append(found, x)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: purging %s: %w", endpoint, err)
	}
	if len(found) == 0 {
		return 0, nil
	}
	b := &pgx.Batch{}
	changed := make([]core.Job, len(found))
	for i, x := range found {
		j := x.job
		change(&j)
		if j.Status == core.InQueue || j.Status == core.InProgress || !knownStatus(j.Status) ||
			j.ID != x.job.ID || j.Endpoint != x.job.Endpoint || j.Owner != x.job.Owner || j.Seq != x.job.Seq {
			return 0, fmt.Errorf("postgres: purging job %s left it %s; want it out of the queue, as it was", j.ID, j.Status)
		}
		if j.Status.Terminal() {
			if err := s.parts.ensure(ctx, s.db, j.ExpiresAt); err != nil {
				return 0, err
			}
		}
		sql, args, err := writeStmt(&x.job, false, &j, x.rev, core.Statuses(core.InQueue), s.parts.name(j.ExpiresAt))
		if err != nil {
			return 0, err
		}
		b.Queue(sql, args...)
		changed[i] = j
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("postgres: purging %s: %w", endpoint, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("postgres: purging %s: %w", endpoint, err)
	}
	for i := range changed {
		s.changed(&found[i].job, &changed[i])
	}
	return len(changed), nil
}

// Stats returns the endpoint's figures; see core.JobStore. The live figures are read from the
// live table each time (it is small). The counts of ended jobs kept, which /health shows, are
// counted over the endpoint's ended jobs at most every StatsEvery and kept up to date between
// by this store's own changes: /health polled often does not count the ended jobs each time.
// Another replica's changes show within StatsEvery.
func (s *Jobs) Stats(ctx context.Context, endpoint string) (core.QueueStats, error) {
	var st core.QueueStats
	var oldest *time.Time
	err := s.db.Pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE status = 'IN_QUEUE'),
			count(*) FILTER (WHERE status = 'IN_QUEUE' AND low),
			count(*) FILTER (WHERE status = 'IN_PROGRESS'),
			min(queued_at) FILTER (WHERE status = 'IN_QUEUE' AND NOT low AND $1 <> '')
		FROM gantry_jobs WHERE $1 = '' OR endpoint = $1`, endpoint).
		Scan(&st.Queued, &st.LowQueued, &st.InProgress, &oldest)
	if err != nil {
		return core.QueueStats{}, fmt.Errorf("postgres: reading the figures of %q: %w", endpoint, err)
	}
	if oldest != nil {
		st.OldestQueuedAt = *oldest
	}
	st.Completed, st.Failed, err = s.ended.counts(ctx, s, endpoint)
	if err != nil {
		return core.QueueStats{}, fmt.Errorf("postgres: counting the ended jobs of %q: %w", endpoint, err)
	}
	return st, nil
}

// endedCounts are the endpoints' counts of ended jobs kept (COMPLETED; FAILED and TIMED_OUT),
// as last counted and changed since by this store.
type endedCounts struct {
	mu   sync.Mutex
	byEp map[string]*endedCount
}

type endedCount struct {
	at                time.Time
	completed, failed int64
}

func (e *endedCounts) counts(ctx context.Context, s *Jobs, endpoint string) (completed, failed int64, err error) {
	if endpoint != "" {
		e.mu.Lock()
		c := e.byEp[endpoint]
		if c != nil && time.Since(c.at) < s.o.StatsEvery {
			completed, failed = c.completed, c.failed
			e.mu.Unlock()
			return completed, failed, nil
		}
		e.mu.Unlock()
	}
	err = s.db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'COMPLETED'),
			count(*) FILTER (WHERE status IN ('FAILED', 'TIMED_OUT'))
		FROM gantry_jobs_ended WHERE ($1 = '' OR endpoint = $1) AND expires_at > `+horizon, endpoint).Scan(&completed, &failed)
	if err != nil || endpoint == "" {
		return completed, failed, err
	}
	e.mu.Lock()
	if e.byEp == nil {
		e.byEp = map[string]*endedCount{}
	}
	e.byEp[endpoint] = &endedCount{at: time.Now(), completed: completed, failed: failed}
	e.mu.Unlock()
	return completed, failed, nil
}

// add counts n more ended jobs of the endpoint in status st (n < 0: fewer).
func (e *endedCounts) add(endpoint string, st core.JobStatus, n int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.byEp[endpoint]
	switch {
	case c == nil:
	case st == core.Completed:
		c.completed += n
	case st == core.Failed || st == core.TimedOut:
		c.failed += n
	}
}

// statsCache holds every endpoint's live figures, read by one grouped query at most every
// StatsEvery, for the autoscaler: its tick reads each endpoint's without a query per endpoint.
type statsCache struct {
	mu     sync.Mutex // held while refreshing: readers that find the figures stale wait for them
	at     time.Time
	byEp   map[string]core.QueueStats
	maxSeq map[string]int64 // each endpoint's newest queued qseq: the poll's ListenAvailable fallback
}

// EndpointStats returns a reader of the endpoint's live figures (queued, lowPriority queued,
// in progress, oldest queued), at most StatsEvery old; see core.EndpointStats. Ended jobs are
// not counted there (Stats counts them).
func (s *Jobs) EndpointStats(endpoint string) func() core.QueueStats {
	return func() core.QueueStats {
		c := &s.stats
		c.mu.Lock()
		defer c.mu.Unlock()
		if time.Since(c.at) >= s.o.StatsEvery {
			if err := s.refreshStats(context.Background()); err != nil {
				s.log.Error("reading the endpoints' queue figures", "err", err)
			}
		}
		return c.byEp[endpoint]
	}
}

// refreshStats reads every endpoint's live figures. c.mu is held.
func (s *Jobs) refreshStats(ctx context.Context) error {
	rows, err := s.db.Pool.Query(ctx, `SELECT endpoint,
			count(*) FILTER (WHERE status = 'IN_QUEUE'),
			count(*) FILTER (WHERE status = 'IN_QUEUE' AND low),
			count(*) FILTER (WHERE status = 'IN_PROGRESS'),
			min(queued_at) FILTER (WHERE status = 'IN_QUEUE' AND NOT low),
			coalesce(max(qseq) FILTER (WHERE status = 'IN_QUEUE'), 0)
		FROM gantry_jobs GROUP BY endpoint`)
	if err != nil {
		return err
	}
	byEp := map[string]core.QueueStats{}
	maxSeq := map[string]int64{}
	err = scanAll(rows, func(r pgx.Rows) error {
		var ep string
		var st core.QueueStats
		var oldest *time.Time
		var q int64
		if err := r.Scan(&ep, &st.Queued, &st.LowQueued, &st.InProgress, &oldest, &q); err != nil {
			return err
		}
		if oldest != nil {
			st.OldestQueuedAt = *oldest
		}
		byEp[ep], maxSeq[ep] = st, q
		return nil
	})
	if err != nil {
		return err
	}
	s.stats.byEp, s.stats.maxSeq, s.stats.at = byEp, maxSeq, time.Now()
	return nil
}
