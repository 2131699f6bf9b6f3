package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/startstop"
)

// JobOptions tune a Jobs store.
type JobOptions struct {
	// PollEvery is the slow poll behind LISTEN/NOTIFY: parked waiters look at the tables this
	// often, so a lost notify costs at most this much latency. 0 = 2 s.
	PollEvery time.Duration
	// NotifyEvery is the least time between two NOTIFYs of the store: what changes meanwhile
	// goes in the next one. It bounds the NOTIFYs a burst costs; a change after a pause is
	// sent at once. 0 = 5 ms.
	NotifyEvery time.Duration
	// StatsEvery bounds the age of the per-endpoint figures the autoscaler reads
	// (EndpointStats): one grouped query over the live jobs refreshes every endpoint's at once.
	// 0 = 1 s.
	StatsEvery time.Duration
	// PartitionWidth is the span of expiry times each partition of the ended jobs holds;
	// 0 = an hour. Every store on one database must use the same width.
	PartitionWidth time.Duration
	// Log reports what the store cannot do in the background; nil = slog.Default().
	Log *slog.Logger
}

// Jobs is core.JobStore on PostgreSQL, shared by every replica that opens the same database.
// Make it with NewJobs, Start it before use (its listener, notifier and poll), and Stop it
// before the DB closes.
type Jobs struct {
	db      *DB
	o       JobOptions
	log     *slog.Logger
	self    string // this store's id in notify payloads: its own notifies are not heard twice
	hub     hub
	parts   partitions
	beats   beats
	stats   statsCache
	ended   endedCounts
	running runningCache
	inserts grouper[*insertReq]
	writes  grouper[*writeReq]
	takes   takeGroups
	// takeHook, set by tests only, is called before each grouped take's statement.
	takeHook func(takers int)
	// pollSeen is each endpoint's newest queued qseq at the poll's last look (nil before the
	// first: what is queued then is not news). The poll's own; read under stats.mu.
	pollSeen map[string]int64

	group  startstop.Group // the listener, the notifier and the poll, between Start and Stop
	notify *notifier
}

// NewJobs makes the job store over db; it starts nothing until Start. The schema is db's
// (Open migrated it).
func NewJobs(db *DB, o JobOptions) *Jobs {
	o.PollEvery = cmp.Or(o.PollEvery, 2*time.Second)
	o.StatsEvery = cmp.Or(o.StatsEvery, time.Second)
	o.NotifyEvery = cmp.Or(o.NotifyEvery, 5*time.Millisecond)
	o.PartitionWidth = cmp.Or(o.PartitionWidth, time.Hour)
	s := &Jobs{db: db, o: o, log: cmp.Or(o.Log, slog.Default()), self: core.NewID(16)}
	s.hub.init()
	s.parts.init(o.PartitionWidth)
	s.beats.init()
	s.notify = newNotifier(s)
	return s
}

// Start connects the listener (one dedicated connection that LISTENs), then runs it, the
// notifier and the slow poll until ctx ends or Stop. An error (the listener could not
// connect) leaves nothing running.
//
// Before that it makes the partitions of the ended jobs that jobs ending now will need, so
// that the first jobs to end find them (see partitions.ahead; a failure is only logged, as
// ending jobs make what is missing).
func (s *Jobs) Start(ctx context.Context) error {
	if err := s.parts.ahead(ctx, s.db, time.Now()); err != nil && ctx.Err() == nil {
		s.log.Warn("postgres: making partitions of ended jobs ahead (ending jobs make them if still missing)", "err", err)
	}
	runCtx, err := s.group.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: starting the job store: %w", err)
	}
	l, err := s.listen(runCtx)
	if err != nil {
		s.group.Stop()
		return err
	}
	s.group.Go(s.notify.run)
	s.group.Go(s.poll)
	if !s.group.Go(l.run) { // ctx ended meanwhile: l.run would have closed the connection
		_ = l.conn.Close(context.WithoutCancel(ctx))
	}
	return nil
}

// Stop stops the listener, the notifier and the poll, and waits for them. The DB stays open.
func (s *Jobs) Stop() { s.group.Stop() }

// DB returns the database the store is on.
func (s *Jobs) DB() *DB { return s.db }

// jobCols are the columns a job's record is read from, in scanRow's order.
const jobCols = `id, endpoint, owner, status, seq, low, worker_id, timeout_ms, queued_at, started_at,
	expires_at, streamed, webhook_pending, output, body, rev`

// body is what a record keeps beside its columns, as JSON.
type body struct {
	Sync      bool            `json:"sync,omitempty"`
	Webhook   string          `json:"webhook,omitempty"`
	Policy    core.JobPolicy  `json:"policy"`
	S3Config  json.RawMessage `json:"s3Config,omitempty"`
	Error     string          `json:"error,omitempty"`
	Retries   int             `json:"retries,omitempty"`
	CreatedAt time.Time       `json:"createdAt"`
	EndedAt   time.Time       `json:"endedAt"`
	Retention time.Duration   `json:"retention"`
	Cost      *core.Charge    `json:"cost,omitempty"`
}

// row is a job as stored: its record and the revision an optimistic update checks.
type row struct {
	job core.Job
	rev int64
}

func scanRow(r pgx.Row, extra ...any) (row, error) {
	var (
		x         row
		j         = &x.job
		status    string
		seq       int64
		low       bool
		output, b []byte
	)
	dst := append([]any{&j.ID, &j.Endpoint, &j.Owner, &status, &seq, &low, &j.WorkerID, &j.TimeoutMs,
		&j.QueuedAt, &j.StartedAt, &j.ExpiresAt, &j.Streamed, &j.WebhookPending, &output, &b, &x.rev}, extra...)
	if err := r.Scan(dst...); err != nil {
		return row{}, err
	}
	var bd body
	if err := json.Unmarshal(b, &bd); err != nil {
		return row{}, fmt.Errorf("job %s: reading its record: %w", j.ID, err)
	}
	j.Status, j.Seq = core.JobStatus(status), uint64(seq)
	if output != nil {
		j.Output = output
	}
	j.Sync, j.Webhook, j.Policy, j.S3Config, j.Error, j.Retries = bd.Sync, bd.Webhook, bd.Policy, bd.S3Config, bd.Error, bd.Retries
	j.CreatedAt, j.EndedAt, j.Retention, j.Cost = bd.CreatedAt, bd.EndedAt, bd.Retention, bd.Cost
	j.Policy.LowPriority = low
	return x, nil
}

// values returns the record's column values in the order of writeCols.
func values(j *core.Job) ([]any, error) {
	b, err := json.Marshal(body{Sync: j.Sync, Webhook: j.Webhook, Policy: j.Policy, S3Config: j.S3Config,
		Error: j.Error, Retries: j.Retries, CreatedAt: j.CreatedAt, EndedAt: j.EndedAt, Retention: j.Retention, Cost: j.Cost})
	if err != nil {
		return nil, err
	}
	var deadline *time.Time
	if j.Status == core.InProgress && j.TimeoutMs > 0 {
		d := j.StartedAt.Add(time.Duration(j.TimeoutMs) * time.Millisecond)
		deadline = &d
	}
	var output []byte
	if j.Output != nil {
		output = j.Output
	}
	return []any{j.ID, j.Endpoint, j.Owner, string(j.Status), int64(j.Seq), j.Policy.LowPriority, j.WorkerID,
		j.TimeoutMs, j.QueuedAt, j.StartedAt, deadline, j.ExpiresAt, j.Streamed, j.WebhookPending, output, b}, nil
}

// writeCols are the columns values fills, $1 to $16.
const writeCols = `id, endpoint, owner, status, seq, low, worker_id, timeout_ms, queued_at, started_at, deadline,
	expires_at, streamed, webhook_pending, output, body`

// setCols sets writeCols from $1 to $16 in an UPDATE (id, endpoint, owner and seq never change).
const setCols = `status = $4, low = $6, worker_id = $7, timeout_ms = $8, queued_at = $9, started_at = $10,
	deadline = $11, expires_at = $12, streamed = $13, webhook_pending = $14, output = $15, body = $16, rev = rev + 1`

// same is the condition of an optimistic write: the row is as read ($17 its revision, $18 the
// statuses the change is allowed from) and its fixed fields match.
const same = `id = $1 AND endpoint = $2 AND owner = $3 AND seq = $5 AND rev = $17 AND status = ANY($18)`

// horizon is the expiry time at or before which ended jobs are gone.
const horizon = `(SELECT at FROM gantry_jobs_horizon)`

// exec runs fn's statements on a connection of the pool. Without durable they run in a
// transaction that does not wait for its commit to reach disk (synchronous_commit off): one
// round trip all the same, as a pipelined batch.
func (s *Jobs) exec(ctx context.Context, durable bool, sql string, args []any, each func(pgx.Rows) error) error {
	if durable {
		rows, err := s.db.Pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		return scanAll(rows, each)
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SET LOCAL synchronous_commit = off")
	var qerr error
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		qerr = scanAll(rows, each)
		return qerr
	})
	b.Queue("COMMIT")
	err := s.db.Pool.SendBatch(ctx, b).Close()
	if qerr != nil {
		return qerr
	}
	return err
}

func scanAll(rows pgx.Rows, each func(pgx.Rows) error) error {
	defer rows.Close()
	for rows.Next() {
		if each != nil {
			if err := each(rows); err != nil {
				return err
			}
		}
	}
	return rows.Err()
}

// Insert stores a new queued job; see core.JobStore.
func (s *Jobs) Insert(ctx context.Context, rec core.Job, input []byte, durable bool) (core.Job, error) {
	if rec.Status != core.InQueue {
		return core.Job{}, fmt.Errorf("postgres: inserting job %s as %s; want %s", rec.ID, rec.Status, core.InQueue)
	}
	args, err := values(&rec)
	if err != nil {
		return core.Job{}, err
	}
	if input == nil {
		input = []byte{}
	}
	// seq is the sequence's, and qseq with it: values' $5 is left out.
	args = append(append(args[:4:4], args[5:]...), input)
	var seq int64
	if durable {
		seq, err = s.insertDurable(ctx, args)
	} else {
		seq, err = s.insertOne(ctx, false, args)
	}
	if err != nil {
		return core.Job{}, err
	}
	rec.Seq = uint64(seq)
	s.queued(rec.Endpoint)
	return rec, nil
}

// takeSQL takes jobs ($1 endpoint, $2 worker, $3 now, $4 max); takeBeatSQL records the
// worker's heartbeat too. Their commit does not wait for the disk (synchronous_commit off for
// their transaction, set inside the statement so that a take stays one statement and one
// round trip): a take is not acknowledged to anyone, and a crash that loses it leaves the job
// queued, to be taken again; the worker's post of the result, which is durable, flushes the
// take with it (the WAL is written in order). Not waiting matters beyond the take: the rows
// it took stay locked until its commit returns, and every other taker's scan passes over
// them (SKIP LOCKED) meanwhile.
const (
	takeSQL     = takeCTEs + takeSelect
	takeBeatSQL = takeCTEs + `,
	beat AS (
		INSERT INTO gantry_job_heartbeats (worker, seen) VALUES ($2, $3)
		ON CONFLICT (worker) DO UPDATE SET seen = greatest(gantry_job_heartbeats.seen, excluded.seen))` + takeSelect

	takeCTEs = `WITH picked AS (
		SELECT id FROM gantry_jobs WHERE endpoint = $1 AND status = 'IN_QUEUE' AND expires_at > $3
		ORDER BY qseq LIMIT $4 FOR UPDATE SKIP LOCKED),
	taken AS (
		UPDATE gantry_jobs j SET status = 'IN_PROGRESS', worker_id = $2, started_at = $3, output = NULL,
			deadline = CASE WHEN j.timeout_ms > 0 THEN $3 + j.timeout_ms * interval '1 millisecond' END,
			rev = rev + 1
		FROM picked WHERE j.id = picked.id
		RETURNING j.*)`
	takeSelect = `
	SELECT ` + jobCols + `, input, qseq FROM taken, (SELECT set_config('synchronous_commit', 'off', true)) AS nosync`
)

// read returns the job's row and whether it has ended (it is in gantry_jobs_ended).
func (s *Jobs) read(ctx context.Context, id string) (row, bool, error) {
	var ended bool
	x, err := scanRow(s.db.Pool.QueryRow(ctx, `SELECT `+jobCols+`, false FROM gantry_jobs WHERE id = $1
		UNION ALL SELECT `+jobCols+`, true FROM gantry_jobs_ended WHERE id = $1 AND expires_at > `+horizon+`
		LIMIT 1`, id), &ended)
	if errors.Is(err, pgx.ErrNoRows) {
		return row{}, false, core.ErrNotFound
	}
	if err != nil {
		return row{}, false, fmt.Errorf("postgres: reading job %s: %w", id, err)
	}
	return x, ended, nil
}

// Get returns a job's record; see core.JobStore.
func (s *Jobs) Get(ctx context.Context, id string) (core.Job, error) {
	x, _, err := s.read(ctx, id)
	return x.job, err
}

// Input returns a job's input; see core.JobStore.
func (s *Jobs) Input(ctx context.Context, id string) ([]byte, error) {
	var in []byte
	err := s.db.Pool.QueryRow(ctx, `SELECT input FROM gantry_jobs WHERE id = $1
		UNION ALL SELECT input FROM gantry_jobs_ended WHERE id = $1 AND expires_at > `+horizon+` LIMIT 1`, id).Scan(&in)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, core.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: reading job %s's input: %w", id, err)
	}
	return in, nil
}

// Update applies a change allowed from the job's status; see core.JobStore.
//
// It is optimistic: it reads the job, applies change, and writes the result in one statement
// that holds only if the job is still as read (`WHERE id = $1 AND status = ANY(from) AND rev =
// read`). If another write came between, it reads again and applies change again (to the
// newer record, or refuses with the status found), so change may run more than once but its
// result is stored once. No lock is held while change runs.
func (s *Jobs) Update(ctx context.Context, id string, from core.StatusSet, change func(*core.Job) error, durable bool) (core.Job, error) {
	x, cached := s.running.get(id)
	for {
		if err := ctx.Err(); err != nil {
			return core.Job{}, err
		}
		ended := false
		if !cached || !from.Has(x.job.Status) {
			cached = false
			var err error
			if x, ended, err = s.read(ctx, id); err != nil {
				return core.Job{}, err
			}
		}
		j, err := apply(x.job, from, change)
		if err != nil && cached {
			cached = false // perhaps stale: look at the stored record
			continue
		}
		if err != nil {
			return core.Job{}, err
		}
		ok, err := s.write(ctx, &x.job, ended, &j, x.rev, from, durable)
		if err != nil {
			return core.Job{}, fmt.Errorf("postgres: updating job %s: %w", id, err)
		}
		if ok {
			if j.Status == core.InProgress {
				s.running.put(id, row{job: j, rev: x.rev + 1})
			} else {
				s.running.drop(id)
			}
			s.changed(&x.job, &j)
			return j, nil
		}
		cached = false
	}
}

// apply returns was changed by change, if from allows it and the change is one a store takes.
func apply(was core.Job, from core.StatusSet, change func(*core.Job) error) (core.Job, error) {
	if !from.Has(was.Status) {
		return core.Job{}, &core.StateError{ID: was.ID, Status: was.Status}
	}
	j := was
	if err := change(&j); err != nil {
		return core.Job{}, err
	}
	switch {
	case !knownStatus(j.Status):
		return core.Job{}, fmt.Errorf("postgres: job %s: unknown status %q", was.ID, j.Status)
	case j.Status == core.InProgress && was.Status != core.InProgress:
		return core.Job{}, fmt.Errorf("postgres: job %s: only Take moves a job %s", was.ID, core.InProgress)
	case j.ID != was.ID || j.Endpoint != was.Endpoint || j.Owner != was.Owner || j.Seq != was.Seq:
		return core.Job{}, fmt.Errorf("postgres: job %s: a change may not alter its id, endpoint, owner or seq", was.ID)
	}
	return j, nil
}

// runningCache keeps the records of the running jobs this store handed out or changed last,
// with their revisions: a worker's post (progress, done) then writes at once, without reading
// the job first. A stale entry (another replica changed the job) only makes the write miss;
// Update then reads the job and applies the change again.
type runningCache struct {
	mu sync.Mutex
	m  map[string]cachedRow
}

type cachedRow struct {
	row
	at time.Time
}

// runningKeep is how long an entry unused may stay: jobs another replica ended are dropped
// after it.
const runningKeep = 10 * time.Minute

func (c *runningCache) get(id string) (row, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[id]
	return r.row, ok
}

func (c *runningCache) put(id string, r row) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cachedRow{}
	}
	c.m[id] = cachedRow{row: r, at: time.Now()}
}

func (c *runningCache) drop(id string) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}

// prune drops the entries older than runningKeep.
func (c *runningCache) prune() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, r := range c.m {
		if time.Since(r.at) > runningKeep {
			delete(c.m, id)
		}
	}
}

func knownStatus(st core.JobStatus) bool { return core.Statuses(st) != 0 }

// write stores j over was (read at rev, in the ended table if ended) in one statement that
// holds only if the row is unchanged. It reports whether it held.
func (s *Jobs) write(ctx context.Context, was *core.Job, ended bool, j *core.Job, rev int64, from core.StatusSet, durable bool) (bool, error) {
	if !j.Status.Terminal() {
		sql, args, err := writeStmt(was, ended, j, rev, from, "")
		if err != nil {
			return false, err
		}
		return s.writeOnce(ctx, durable, sql, args)
	}
	if err := s.parts.ensure(ctx, s.db, j.ExpiresAt); err != nil {
		return false, err
	}
	sql, args, err := writeStmt(was, ended, j, rev, from, s.parts.name(j.ExpiresAt))
	if err != nil {
		return false, err
	}
	ok, err := s.writeOnce(ctx, durable, sql, args)
	if isNoPartition(err) {
		// Another replica dropped the partition since this store made it (its range
		// passed the horizon): make it again.
		s.parts.forget(j.ExpiresAt)
		if err := s.parts.ensure(ctx, s.db, j.ExpiresAt); err != nil {
			return false, err
		}
		ok, err = s.writeOnce(ctx, durable, sql, args)
	}
	return ok, err
}

// writeStmt returns the statement that stores j over was, and its arguments: an update in
// place, or a move between the live and the ended table, each guarded by same. A job that
// ends is inserted into part, the partition of gantry_jobs_ended that its expiry falls in:
// inserting there rather than into the partitioned table spares PostgreSQL the routing of
// the row, which costs more than the insert itself. part is that of an expiry core puts past
// the horizon, so not a span that partitions.dropPast detaches and drops (see there for a
// clock far behind).
func writeStmt(was *core.Job, ended bool, j *core.Job, rev int64, from core.StatusSet, part string) (string, []any, error) {
	args, err := values(j)
	if err != nil {
		return "", nil, err
	}
	args = append(args, rev, statusNames(from))
	if ended {
		args = append(args, was.ExpiresAt) // $19: the partition it is in
	}
	requeue := j.Status == core.InQueue && was.Status != core.InQueue
	dropChunks := ""
	if requeue && was.Streamed {
		dropChunks = `, chunks AS (DELETE FROM gantry_job_chunks WHERE job_id = $1 AND EXISTS (SELECT 1 FROM moved))`
	}
	switch done := j.Status.Terminal(); {
	case !ended && !done:
		return `WITH moved AS (UPDATE gantry_jobs SET ` + setCols + `, qseq = ` + qseqFrom(requeue) + `
			WHERE ` + same + ` RETURNING 1)` + dropChunks + ` SELECT 1 FROM moved`, args, nil
	case ended && done:
		return `WITH moved AS (UPDATE gantry_jobs_ended SET ` + setCols + `
			WHERE ` + same + ` AND expires_at = $19 RETURNING 1) SELECT 1 FROM moved`, args, nil
	}
	// Between the tables: the row moves in one statement.
	src, dst, cond := "gantry_jobs", "gantry_jobs_ended", ""
	if ended {
		src, dst, cond = dst, src, " AND expires_at = $19"
	} else {
		dst = pgx.Identifier{part}.Sanitize()
	}
	return `WITH moved AS (DELETE FROM ` + src + ` WHERE ` + same + cond + ` RETURNING input, qseq, rev)` + dropChunks + `,
		ins AS (INSERT INTO ` + dst + ` (` + writeCols + `, input, qseq, rev)
			SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, input, ` +
		qseqFrom(requeue) + `, rev + 1 FROM moved RETURNING 1)
		SELECT 1 FROM ins`, args, nil
}

func qseqFrom(requeue bool) string {
	if requeue {
		return "nextval('gantry_job_seq')"
	}
	return "qseq"
}

func (s *Jobs) writeOnce(ctx context.Context, durable bool, sql string, args []any) (bool, error) {
	if durable {
		return s.writeDurable(ctx, sql, args)
	}
	n := 0
	err := s.exec(ctx, false, sql, args, func(pgx.Rows) error { n++; return nil })
	return n > 0, err
}

// changed follows a stored change: wake-ups for a job that ended or went back to the queue.
func (s *Jobs) changed(was, j *core.Job) {
	if was.Status != j.Status {
		if was.Status.Terminal() {
			s.ended.add(j.Endpoint, was.Status, -1)
		}
		if j.Status.Terminal() {
			s.ended.add(j.Endpoint, j.Status, 1)
		}
	}
	if j.Status.Terminal() && !was.Status.Terminal() {
		s.jobChanged(j.ID)
	}
	if j.Status == core.InQueue && was.Status != core.InQueue {
		s.queued(j.Endpoint)
	}
}

var allStatuses = []core.JobStatus{core.InQueue, core.InProgress, core.Completed, core.Failed, core.Cancelled, core.TimedOut}

func statusNames(set core.StatusSet) []string {
	var out []string
	for _, st := range allStatuses {
		if set.Has(st) {
			out = append(out, string(st))
		}
	}
	return out
}

var (
	_ core.JobStore      = (*Jobs)(nil)
	_ core.EndpointStats = (*Jobs)(nil)
)
