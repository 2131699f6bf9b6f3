package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gantryhq/gantry/core"
)

// partitions makes the partitions of gantry_jobs_ended that ended jobs need, and drops the
// ones whose whole range passed the horizon. Each holds the jobs expiring in one span of
// width; its name carries the span's number (Unix time / width).
//
// A partition is made ahead of need, off the path of the jobs that end (ahead, from Start
// and from each Expire), so the statement that ends a job finds its partition known and runs
// no DDL; ensure, in that path, is the fallback for an expiry ahead did not foresee.
type partitions struct {
	width time.Duration
	mu    sync.Mutex
	made  map[int64]bool // partitions this store made or saw
	// checked is the span of the horizon when a drop was last owed: another is owed once the
	// horizon reaches a later span.
	checked int64
	once    bool
	// dropTo is the horizon that the partitions to drop end at or before (zero: no drop owed),
	// and dropFailed when the last drop did not finish (by Expire's clock): Expire tries again
	// dropRetry later, unless the clock went back.
	dropTo     time.Time
	dropFailed time.Time
	// failed is when ahead last failed (by its caller's clock): it waits aheadRetry from
	// then before it tries again, unless the clock went back.
	failed time.Time
}

// endRetentions are the retentions core gives a job (core.Jobs.ending sets its expiry to its
// end plus its retention): every job that ends through core expires one of these after its
// end. Other expiries (a status read with a ttl, which moves an ended job's expiry) are rare
// and left to ensure.
var endRetentions = [...]time.Duration{core.RunSyncRetention, core.RunSyncLongRetention, core.RunRetention}

// aheadRetry is how long ahead waits after a failure before it tries again; aheadLockWait
// is the longest it waits for a lock.
const (
	aheadRetry    = 10 * time.Second
	aheadLockWait = time.Second
)

// dropLockWait is the longest each statement of dropPast waits, for a lock or for the
// transactions it must outlast; dropRetry is how long Expire waits, after a drop that did not
// finish, before it tries again.
const (
	dropLockWait = time.Second
	dropRetry    = 10 * time.Second
)

// errDropLater marks a drop that could not finish now for want of waiting longer: a lock not
// had within dropLockWait, older transactions still open, or another replica's detach under
// way. The next try finishes it.
var errDropLater = errors.New("not done within the lock wait")

// owe notes that the horizon moved to h: once it reaches a span later than at the last
// check, the partitions it passed are owed a drop (dropDue, dropped).
func (p *partitions) owe(h time.Time) {
	b := p.bucket(h)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.once && b <= p.checked {
		return
	}
	p.checked, p.once = b, true
	if h.After(p.dropTo) {
		p.dropTo = h
	}
}

// dropDue returns the horizon to drop the partitions past, if a drop is owed and is not
// waiting after one that did not finish.
func (p *partitions) dropDue(now time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dropTo.IsZero() || !now.Before(p.dropFailed) && now.Before(p.dropFailed.Add(dropRetry)) {
		return time.Time{}, false
	}
	return p.dropTo, true
}

// dropped records how the drop of the partitions past h, run at now, ended.
func (p *partitions) dropped(h, now time.Time, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.dropFailed = now
		return
	}
	p.dropFailed = time.Time{}
	if !p.dropTo.After(h) {
		p.dropTo = time.Time{}
	}
}

func (p *partitions) init(width time.Duration) {
	p.width = width
	p.made = map[int64]bool{}
}

// bucket returns the number of the span t is in.
func (p *partitions) bucket(t time.Time) int64 {
	w := p.width.Microseconds()
	us := t.UnixMicro()
	b := us / w
	if us%w < 0 {
		b--
	}
	return b
}

func (p *partitions) bounds(b int64) (time.Time, time.Time) {
	w := p.width.Microseconds()
	return time.UnixMicro(b * w).UTC(), time.UnixMicro((b + 1) * w).UTC()
}

func partitionName(b int64) string {
	if b < 0 {
		return "gantry_jobs_ended_m" + strconv.FormatInt(-b, 10)
	}
	return "gantry_jobs_ended_p" + strconv.FormatInt(b, 10)
}

// name returns the name of the partition that a job expiring at t goes to.
func (p *partitions) name(t time.Time) string { return partitionName(p.bucket(t)) }

func (p *partitions) known(b int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.made[b]
}

// ensure makes the partition that a job expiring at t goes to, unless this store knows it.
func (p *partitions) ensure(ctx context.Context, db *DB, t time.Time) error {
	b := p.bucket(t)
	if p.known(b) {
		return nil
	}
	if err := p.make(ctx, db, b, 0); err != nil {
		return fmt.Errorf("making the partition of jobs expiring at %v: %w", t, err)
	}
	return nil
}

// ahead makes the partitions that the jobs ending from now until a span later go to, for
// each retention of endRetentions: with retention r they expire from now+r to now+r+width,
// in the span of now+r or the next one. Run at Start and at each Expire (core's tick), it
// makes each partition about a span before the first job that needs it, so ensure finds it
// known; a partition this store knows costs a map lookup, no statement. After a failure it
// waits aheadRetry; its DDL waits at most aheadLockWait for a lock.
func (p *partitions) ahead(ctx context.Context, db *DB, now time.Time) error {
	p.mu.Lock()
	wait := !now.Before(p.failed) && now.Before(p.failed.Add(aheadRetry))
	p.mu.Unlock()
	if wait {
		return nil
	}
	for _, r := range endRetentions {
		b := p.bucket(now.Add(r))
		for _, b := range [2]int64{b, b + 1} {
			if p.known(b) {
				continue
			}
			if err := p.make(ctx, db, b, aheadLockWait); err != nil {
				p.mu.Lock()
				p.failed = now
				p.mu.Unlock()
				return fmt.Errorf("making the partition %s ahead: %w", partitionName(b), err)
			}
		}
	}
	return nil
}

// make makes the partition of span b, waiting at most lockWait for a lock (0 = no limit).
//
// It does not run CREATE TABLE … PARTITION OF, which takes an AccessExclusiveLock on
// gantry_jobs_ended: that waits for every transaction reading it and holds every later one
// behind it, a convoy of status reads and lists. It makes a plain table and attaches it, in
// one transaction, so no other session ever sees the table unattached (a job inserted by
// name would be lost to the reads): ATTACH PARTITION takes only a ShareUpdateExclusiveLock on
// gantry_jobs_ended, which reads and writes do not wait for, nor it for them. Checking the
// new table against the range reads an empty table.
func (p *partitions) make(ctx context.Context, db *DB, b int64, lockWait time.Duration) error {
	lo, hi := p.bounds(b)
	name := pgx.Identifier{partitionName(b)}.Sanitize()
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if err := setLockWait(ctx, tx, lockWait); err != nil {
			return err
		}
		// Made by another replica, or by this one before a restart: no error in the server's
		// log. Each is made attached, so one that exists is attached, but for one that dropPast
		// detached and has yet to drop: its span is past the horizon, so a job that ends into
		// it would be hidden (expired) in the partition too.
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, partitionName(b)).Scan(&exists); err != nil || exists {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE `+name+` (LIKE gantry_jobs_ended)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE gantry_jobs_ended ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`,
			name, lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano)))
		return err
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P07" || pe.Code == "23505") {
		err = nil // another replica made it at the same moment
	}
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.made[b] = true
	p.mu.Unlock()
	return nil
}

// forget drops what the store knows of t's partition (another replica dropped it).
func (p *partitions) forget(t time.Time) {
	p.mu.Lock()
	delete(p.made, p.bucket(t))
	p.mu.Unlock()
}

// dropPast drops every partition whose range ends at or before the horizon: its jobs were
// all reported by Expire, and a dropped table leaves nothing for VACUUM. It returns an error
// wrapping errDropLater when a statement could not finish within dropLockWait; what it did
// stays done, and the next call goes on from there.
//
// It does not DROP TABLE a partition: that takes an AccessExclusiveLock on gantry_jobs_ended,
// which waits for every transaction reading it (a read by id or a list locks every partition)
// and holds every later read and write behind it, a convoy once a span. It detaches the
// partition first, with DETACH PARTITION CONCURRENTLY: a ShareUpdateExclusiveLock on
// gantry_jobs_ended, which reads and writes neither wait for nor hold up (only ATTACH, see
// make, waits for it), then it waits, holding no lock they queue behind, for the transactions
// that may still see the partition; the transactions that begin meanwhile no longer see it.
// The detached table is then a table of its own, and dropping it locks nothing else.
//
// Nothing reads a partition but through gantry_jobs_ended. Only the statement that ends a job
// (writeStmt) names one, to insert into: the partition of the job's new expiry, which core
// puts at the end plus a retention, so past the horizon, not in a span this drops. A job
// ending into a past span all the same (a replica's clock far behind) goes to a table that
// is being detached or dropped: dropped, it is made again (isNoPartition); detached, the row
// is lost with the table, but its expiry is at or before the horizon, so it was gone (hidden
// from every read) the moment it was written.
//
// Replicas may drop at the same moment, and a drop may stop half way (a lock not had, a
// replica gone): a detach interrupted while it waited leaves the partition pending
// (pg_inherits.inhdetachpending), which reads no longer see but which keeps every other
// partition from being detached concurrently until DETACH PARTITION … FINALIZE completes it.
// So dropPast lists the partitions past the horizon with their state, tables detached and not
// yet dropped among them, and first finalizes the pending ones; a partition or table that
// another replica detached or dropped meanwhile is done.
func (p *partitions) dropPast(ctx context.Context, db *DB, horizon time.Time) error {
	rows, err := db.Pool.Query(ctx, `SELECT c.relname, i.inhrelid IS NOT NULL, coalesce(i.inhdetachpending, false)
		FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid AND i.inhparent = 'gantry_jobs_ended'::regclass
		WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'gantry_jobs_ended'::regclass)
			AND c.relkind = 'r' AND c.relname LIKE 'gantry\_jobs\_ended\_%'
			AND (i.inhrelid IS NOT NULL OR NOT c.relispartition)`)
	if err != nil {
		return err
	}
	type table struct {
		name              string
		attached, pending bool
		b                 int64
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var t table
		err := r.Scan(&t.name, &t.attached, &t.pending)
		return t, err
	})
	if err != nil {
		return err
	}
	var past []table
	for _, t := range tables {
		num, ok := strings.CutPrefix(t.name, "gantry_jobs_ended_")
		if !ok || len(num) < 2 || num[0] != 'p' && num[0] != 'm' {
			continue
		}
		b, err := strconv.ParseInt(num[1:], 10, 64)
		if err != nil {
			continue
		}
		if num[0] == 'm' {
			b = -b
		}
		if _, hi := p.bounds(b); hi.After(horizon) {
			continue
		}
		t.b = b
		past = append(past, t)
	}
	// A pending detach first: while one is, no other partition can be detached.
	slices.SortStableFunc(past, func(x, y table) int {
		switch {
		case x.pending == y.pending:
			return 0
		case x.pending:
			return -1
		}
		return 1
	})
	for _, t := range past {
		name := pgx.Identifier{t.name}.Sanitize()
		var err error
		switch {
		case t.pending:
			err = inTx(ctx, db, dropLockWait, `ALTER TABLE gantry_jobs_ended DETACH PARTITION `+name+` FINALIZE`)
		case t.attached:
			err = detachConcurrently(ctx, db, name)
		}
		if err == nil {
			err = dropDetached(ctx, db, t.name)
		}
		if err = dropOutcome(err); err != nil {
			return fmt.Errorf("dropping %s: %w", t.name, err)
		}
		p.mu.Lock()
		delete(p.made, t.b)
		p.mu.Unlock()
	}
	return nil
}

// dropOutcome returns nil for an error that says another replica did the work (the table
// is no partition any more, or is gone), and wraps errDropLater into one that says the work
// waits for other transactions.
func dropOutcome(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case "42P01": // undefined_table: "is not a partition of", or no such table
		return nil
	case "55P03", // lock_not_available: lock_timeout
		"55000": // object_not_in_prerequisite_state: another partition's detach is pending
		return fmt.Errorf("%w: %w", errDropLater, err)
	}
	return err
}

// detachConcurrently detaches the partition (a quoted name) with DETACH PARTITION
// CONCURRENTLY, waiting at most dropLockWait for each lock and for the transactions that
// may still see it. The statement cannot run in a transaction, so SET LOCAL cannot bound it:
// it runs on a connection of its own with lock_timeout set for the session, and reset after;
// a connection that could not be reset is closed, not given back to the pool.
func detachConcurrently(ctx context.Context, db *DB, name string) error {
	c, err := db.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	if _, err := c.Exec(ctx, `SET lock_timeout = `+strconv.FormatInt(dropLockWait.Milliseconds(), 10)); err != nil {
		_ = c.Conn().Close(ctx)
		return err
	}
	_, err = c.Exec(ctx, `ALTER TABLE gantry_jobs_ended DETACH PARTITION `+name+` CONCURRENTLY`)
	if _, rerr := c.Exec(ctx, `RESET lock_timeout`); rerr != nil {
		_ = c.Conn().Close(ctx)
	}
	return err
}

// dropDetached drops the table called name once it is no partition: then it is a table of
// its own (detached), whose drop locks only itself. One still a partition is left: its drop
// would lock gantry_jobs_ended. Nothing attaches a table that exists (make only attaches the
// table it creates), so it stays detached from the check to the drop.
func dropDetached(ctx context.Context, db *DB, name string) error {
	return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if err := setLockWait(ctx, tx, dropLockWait); err != nil {
			return err
		}
		var part bool
		err := tx.QueryRow(ctx, `SELECT relispartition FROM pg_class WHERE oid = to_regclass($1)`, name).Scan(&part)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // dropped by another replica
		}
		if err != nil {
			return err
		}
		if part {
			return fmt.Errorf("%w: %s is a partition again", errDropLater, name)
		}
		_, err = tx.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{name}.Sanitize())
		return err
	})
}

// inTx runs the statement in a transaction of its own, which waits at most lockWait for a
// lock (0 = no limit).
func inTx(ctx context.Context, db *DB, lockWait time.Duration, sql string) error {
	return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if err := setLockWait(ctx, tx, lockWait); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql)
		return err
	})
}

// setLockWait sets lock_timeout for the rest of the transaction (0 leaves it).
func setLockWait(ctx context.Context, tx pgx.Tx, lockWait time.Duration) error {
	if lockWait <= 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, strconv.FormatInt(lockWait.Milliseconds(), 10))
	return err
}

// isNoPartition reports the error of a row for which no partition exists, or of an insert
// into a partition that is gone.
func isNoPartition(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return pe.Code == "23514" && strings.Contains(pe.Message, "no partition") ||
		pe.Code == "42P01" && strings.Contains(pe.Message, "gantry_jobs_ended_")
}

// Expire removes the jobs past their expiry; see core.JobStore.
//
// Live jobs past their ttl are deleted (few: the live table holds only queued and running
// jobs). Ended jobs are not deleted one by one: the horizon moves to now, which hides them at
// once and reports each once (replicas that expire at the same moment take turns on the
// horizon's row), and their partitions are dropped whole once the horizon is past them.
//
// It also makes the partitions the jobs ending from now on will need (partitions.ahead), here
// rather than in the statements that end them.
func (s *Jobs) Expire(ctx context.Context, now time.Time) ([]core.ExpiredJob, error) {
	if err := s.parts.ahead(ctx, s.db, now); err != nil && ctx.Err() == nil {
		s.log.Warn("postgres: making partitions of ended jobs ahead (ending jobs make them if still missing)", "err", err)
	}
	var out []core.ExpiredJob
	var streamed []string
	scan := func(r pgx.Rows) error {
		var x core.ExpiredJob
		var st string
		var str bool
		if err := r.Scan(&x.ID, &x.Endpoint, &x.WorkerID, &st, &x.LowPriority, &str); err != nil {
			return err
		}
		x.Status = core.JobStatus(st)
		out = append(out, x)
		if str {
			streamed = append(streamed, x.ID)
		}
		return nil
	}
	var due bool
	// Live jobs are queued or running: each kind is found through its partial index.
	err := s.exec(ctx, true, `WITH gone AS (DELETE FROM gantry_jobs WHERE expires_at <= $1 AND id IN (
				SELECT id FROM gantry_jobs WHERE status = 'IN_QUEUE' AND expires_at <= $1
				UNION ALL SELECT id FROM gantry_jobs WHERE status = 'IN_PROGRESS' AND expires_at <= $1)
			RETURNING id, endpoint, worker_id, status, low, streamed)
		SELECT id, endpoint, worker_id, status, low, streamed FROM gone
		UNION ALL SELECT '', '', '', '', false, false WHERE EXISTS (
			SELECT 1 FROM gantry_jobs_ended WHERE expires_at > `+horizon+` AND expires_at <= $1)`,
		[]any{now}, func(r pgx.Rows) error {
			if err := scan(r); err != nil {
				return err
			}
			if out[len(out)-1].ID == "" { // the mark that ended jobs are due
				out, due = out[:len(out)-1], true
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("postgres: expiring jobs: %w", err)
	}
	if due {
		var moved bool
		err := s.exec(ctx, true, `WITH old AS (SELECT at FROM gantry_jobs_horizon FOR UPDATE),
				gone AS (SELECT id, endpoint, worker_id, status, low, streamed FROM gantry_jobs_ended, old
					WHERE expires_at > old.at AND expires_at <= $1),
				moved AS (UPDATE gantry_jobs_horizon SET at = $1 WHERE at < $1 RETURNING 1)
			SELECT * FROM gone`, []any{now}, func(r pgx.Rows) error { moved = true; return scan(r) })
		if err != nil {
			return out, fmt.Errorf("postgres: expiring ended jobs: %w", err)
		}
		if moved {
			s.parts.owe(now)
		}
	}
	// Owed since the horizon moved into a later span, or since a drop that did not finish.
	if h, ok := s.parts.dropDue(now); ok {
		err := s.parts.dropPast(ctx, s.db, h)
		s.parts.dropped(h, now, err)
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, errDropLater):
			s.log.Info("postgres: dropping a past partition of ended jobs waits for other transactions; trying again later",
				"err", err, "retry", dropRetry)
		default:
			s.log.Error("postgres: dropping partitions of expired jobs", "err", err)
		}
	}
	if len(streamed) > 0 {
		if _, err := s.db.Pool.Exec(ctx, `DELETE FROM gantry_job_chunks WHERE job_id = ANY($1)`, streamed); err != nil {
			return out, fmt.Errorf("postgres: dropping expired jobs' chunks: %w", err)
		}
	}
	for _, x := range out {
		s.running.drop(x.ID)
		if x.Status.Terminal() {
			s.ended.add(x.Endpoint, x.Status, -1)
		} else {
			s.jobChanged(x.ID)
		}
	}
	return out, nil
}

// Overdue returns the running jobs past their execution timeout; see core.JobStore.
func (s *Jobs) Overdue(ctx context.Context, now time.Time) ([]string, error) {
	rows, err := s.db.Pool.Query(ctx, `SELECT id FROM gantry_jobs WHERE deadline <= $1 AND status = 'IN_PROGRESS'`, now)
	if err != nil {
		return nil, fmt.Errorf("postgres: finding jobs past their timeout: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: finding jobs past their timeout: %w", err)
	}
	return ids, nil
}
