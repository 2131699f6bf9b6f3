package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Group commit of durable inserts. Concurrent /run requests each wait for a commit that
// reaches the disk; inserted one by one, each pays a statement, a transaction and a commit
// record of its own. The first Insert that finds no group running becomes its leader: it
// inserts every request waiting at that moment in one multi-row statement (one commit),
// hands each its result, and passes the lead on if more arrived meanwhile. There is no
// waiting window: an Insert alone is inserted at once, and a burst groups itself by the time
// the previous group's commit takes. A group that fails (one id exists) is inserted again
// one by one, so that only that request gets the error.

// maxGroup bounds the inserts of one statement.
const maxGroup = 256

type insertReq struct {
	args  []any // values' columns without seq, then input
	seq   int64
	err   error
	ready chan struct{}
}

func (r *insertReq) done() { close(r.ready) }

// grouper runs concurrent requests in groups: the first request to arrive leads and runs every
// request waiting at that moment as one group (at most maxGroup); if more arrived meanwhile it
// hands the lead to a new goroutine, so that a leader's own request is not held up by a steady
// stream of others.
type grouper[R interface{ done() }] struct {
	mu      sync.Mutex
	pending []R
	leading bool
}

// join queues r and reports whether the caller must lead (call lead).
func (g *grouper[R]) join(r R) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pending = append(g.pending, r)
	lead := !g.leading
	g.leading = true
	return lead
}

// lead runs one group with run, which sets each request's result, then marks them done.
func (g *grouper[R]) lead(ctx context.Context, run func(ctx context.Context, batch []R)) {
	g.mu.Lock()
	batch := g.pending
	if len(batch) > maxGroup {
		batch = batch[:maxGroup]
	}
	g.pending = g.pending[len(batch):]
	if len(batch) == 0 {
		g.pending, g.leading = nil, false
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	run(ctx, batch)
	for _, r := range batch {
		r.done()
	}
	g.mu.Lock()
	more := len(g.pending) > 0
	if !more {
		g.pending, g.leading = nil, false
	}
	g.mu.Unlock()
	if more {
		go g.lead(ctx, run)
	}
}

// insertDurable inserts args (Insert's) durably, grouped with concurrent callers.
func (s *Jobs) insertDurable(ctx context.Context, args []any) (int64, error) {
	r := &insertReq{args: args, ready: make(chan struct{})}
	if s.inserts.join(r) {
		// The group outlives the leader's request: others wait on it.
		s.inserts.lead(context.WithoutCancel(ctx), s.runInserts)
	}
	select {
	case <-r.ready:
		return r.seq, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// runInserts inserts one group in one statement, or each alone if the group fails.
func (s *Jobs) runInserts(ctx context.Context, batch []*insertReq) {
	if len(batch) == 1 {
		batch[0].seq, batch[0].err = s.insertOne(ctx, true, batch[0].args)
	} else if err := s.insertGroup(ctx, batch); err != nil {
		for _, r := range batch {
			r.seq, r.err = s.insertOne(ctx, true, r.args)
		}
	}
}

// insertSQL inserts one job: $1-$15 its columns (values' without seq), $16 its input.
const insertSQL = `INSERT INTO gantry_jobs (id, endpoint, owner, status, low, worker_id, timeout_ms,
		queued_at, started_at, deadline, expires_at, streamed, webhook_pending, output, body, input, seq, qseq, rev)
	SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, n, n, 1
	FROM nextval('gantry_job_seq') AS n RETURNING seq`

// insertGroupSQL inserts many jobs, each column an array, seq in the arrays' order.
const insertGroupSQL = `INSERT INTO gantry_jobs (id, endpoint, owner, status, low, worker_id, timeout_ms,
		queued_at, started_at, deadline, expires_at, streamed, webhook_pending, output, body, input, seq, qseq, rev)
	SELECT u.id, u.endpoint, u.owner, u.status, u.low, u.worker_id, u.timeout_ms, u.queued_at, u.started_at,
		u.deadline, u.expires_at, u.streamed, u.webhook_pending, u.output, u.body, u.input, u.n, u.n, 1
	FROM (SELECT v.*, nextval('gantry_job_seq') AS n FROM (SELECT * FROM unnest($1::text[], $2::text[], $3::text[],
		$4::text[], $5::bool[], $6::text[], $7::bigint[], $8::timestamptz[], $9::timestamptz[], $10::timestamptz[],
		$11::timestamptz[], $12::bool[], $13::bool[], $14::bytea[], $15::bytea[], $16::bytea[]) WITH ORDINALITY
		AS v(id, endpoint, owner, status, low, worker_id, timeout_ms, queued_at, started_at, deadline, expires_at,
			streamed, webhook_pending, output, body, input, ord) ORDER BY ord) v) u
	RETURNING id, seq`

func (s *Jobs) insertOne(ctx context.Context, durable bool, args []any) (int64, error) {
	var seq int64
	err := s.exec(ctx, durable, insertSQL, args, func(r pgx.Rows) error { return r.Scan(&seq) })
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return 0, fmt.Errorf("postgres: job %s exists", args[0])
		}
		return 0, fmt.Errorf("postgres: inserting job %s: %w", args[0], err)
	}
	return seq, nil
}

// insertGroup inserts the batch in one statement and sets each request's seq.
func (s *Jobs) insertGroup(ctx context.Context, batch []*insertReq) error {
	n := len(batch)
	var (
		ids, endpoints, owners, statuses, workers = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		lows, streamed, hooks                     = make([]bool, n), make([]bool, n), make([]bool, n)
		timeouts                                  = make([]int64, n)
		queued, started, expires                  = make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
		deadlines                                 = make([]*time.Time, n)
		outputs, bodies, inputs                   = make([][]byte, n), make([][]byte, n), make([][]byte, n)
	)
	byID := make(map[string]*insertReq, n)
	for i, r := range batch {
		a := r.args
		ids[i], endpoints[i], owners[i], statuses[i] = a[0].(string), a[1].(string), a[2].(string), a[3].(string)
		lows[i], workers[i], timeouts[i] = a[4].(bool), a[5].(string), a[6].(int64)
		queued[i], started[i], deadlines[i], expires[i] = a[7].(time.Time), a[8].(time.Time), a[9].(*time.Time), a[10].(time.Time)
		streamed[i], hooks[i], outputs[i], bodies[i], inputs[i] = a[11].(bool), a[12].(bool), a[13].([]byte), a[14].([]byte), a[15].([]byte)
		if byID[ids[i]] != nil {
			return fmt.Errorf("job %s twice in one group", ids[i])
		}
		byID[ids[i]] = r
	}
	got := 0
	err := s.exec(ctx, true, insertGroupSQL, []any{ids, endpoints, owners, statuses, lows, workers, timeouts,
		queued, started, deadlines, expires, streamed, hooks, outputs, bodies, inputs}, func(rows pgx.Rows) error {
		var id string
		var seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			return err
		}
		if r := byID[id]; r != nil {
			r.seq = seq
			got++
		}
		return nil
	})
	if err == nil && got != n {
		err = fmt.Errorf("inserted %d of %d jobs", got, n)
	}
	return err
}

// Group commit of durable writes (a worker's post of its result, a cancel): the same scheme
// as the inserts, each write its own guarded statement, all of a group pipelined in one
// transaction with one commit. If any statement of a group fails, the transaction is rolled
// back and each write runs again alone, so that only its own error reaches each caller.

type writeReq struct {
	sql   string
	args  []any
	n     int // rows the statement returned: whether its guard held
	err   error
	ready chan struct{}
}

func (r *writeReq) done() { close(r.ready) }

// writeDurable runs one guarded write durably, grouped with concurrent callers, and reports
// whether it returned a row.
func (s *Jobs) writeDurable(ctx context.Context, sql string, args []any) (bool, error) {
	r := &writeReq{sql: sql, args: args, ready: make(chan struct{})}
	if s.writes.join(r) {
		s.writes.lead(context.WithoutCancel(ctx), s.runWrites)
	}
	select {
	case <-r.ready:
		return r.n > 0, r.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// runWrites runs one group of writes in one transaction, or each alone if the group fails.
func (s *Jobs) runWrites(ctx context.Context, batch []*writeReq) {
	if len(batch) == 1 || s.writeGroup(ctx, batch) != nil {
		for _, r := range batch {
			r.n = 0
			r.err = s.exec(ctx, true, r.sql, r.args, func(pgx.Rows) error { r.n++; return nil })
		}
	}
}

// writeGroup runs the batch's writes in one transaction, one round trip.
func (s *Jobs) writeGroup(ctx context.Context, batch []*writeReq) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	var failed error
	for _, r := range batch {
		b.Queue(r.sql, r.args...).Query(func(rows pgx.Rows) error {
			err := scanAll(rows, func(pgx.Rows) error { r.n++; return nil })
			if err != nil && failed == nil {
				failed = err
			}
			return err
		})
	}
	b.Queue("COMMIT")
	err := s.db.Pool.SendBatch(ctx, b).Close()
	if failed != nil {
		return failed
	}
	return err
}
