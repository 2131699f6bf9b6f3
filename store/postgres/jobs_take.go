package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gantryhq/gantry/core"
)

// A take for many workers at once. Concurrent Take calls for one endpoint on one store group
// themselves, as durable inserts do (grouper): the first to find no take of the endpoint
// running leads, and one statement takes the jobs of every taker waiting at that moment, each
// job moved IN_PROGRESS to the worker of one taker's slot, as that taker's own take would have.
// The jobs are then handed out in memory. A taker whose context ends before its jobs reach it
// gets nothing, and its jobs go back to the head of the queue (untake): they were never handed
// to its worker. If the replica dies first, its jobs are held by its worker in the table, as a
// take whose answer was lost: the rules for lost workers and timeouts take them back.

// takeReq is one Take call waiting in its endpoint's group.
type takeReq struct {
	worker string
	max    int
	now    time.Time
	ready  chan struct{} // closed once got and err are set
	got    []core.TakenJob
	revs   []int64 // got's revisions as taken: only a job still so goes back
	err    error
	state  takeState // under takeGroups.mu
}

type takeState int

const (
	takePending takeState = iota // waiting for a leader
	takeRunning                  // in the statement running now
	takeGone                     // its caller left while in the statement: its jobs go back
	takeDone                     // got and err set, ready closed
)

// takeGroups holds each endpoint's waiting takers.
type takeGroups struct {
	mu  sync.Mutex
	eps map[string]*takeGroup
}

type takeGroup struct {
	pending []*takeReq
	leading bool
}

// maxTakeSlots bounds the jobs one grouped take moves; a taker asking for more takes alone.
const maxTakeSlots = 256

// join queues r for endpoint and reports whether the caller must lead.
func (g *takeGroups) join(endpoint string, r *takeReq) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.eps == nil {
		g.eps = map[string]*takeGroup{}
	}
	tg := g.eps[endpoint]
	if tg == nil {
		tg = &takeGroup{}
		g.eps[endpoint] = tg
	}
	tg.pending = append(tg.pending, r)
	lead := !tg.leading
	tg.leading = true
	return lead
}

// next removes the next batch of endpoint's pending takers (at most maxTakeSlots slots, at
// least one taker), marking them running; none left ends the lead.
func (g *takeGroups) next(endpoint string) []*takeReq {
	g.mu.Lock()
	defer g.mu.Unlock()
	tg := g.eps[endpoint]
	n, slots := 0, 0
	for n < len(tg.pending) && (n == 0 || slots+tg.pending[n].max <= maxTakeSlots) {
		slots += tg.pending[n].max
		n++
	}
	if n == 0 {
		delete(g.eps, endpoint)
		return nil
	}
	batch := slices.Clone(tg.pending[:n])
	tg.pending = slices.Delete(tg.pending, 0, n)
	for _, r := range batch {
		r.state = takeRunning
	}
	return batch
}

// leave removes r, whose caller's context ended, if it is still pending; it reports r's
// state: pending (removed: nothing was taken for it), running (now gone: the leader puts its
// jobs back) or done (its caller puts them back).
func (g *takeGroups) leave(endpoint string, r *takeReq) takeState {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch r.state {
	case takePending:
		if tg := g.eps[endpoint]; tg != nil {
			if i := slices.Index(tg.pending, r); i >= 0 {
				tg.pending = slices.Delete(tg.pending, i, i+1)
			}
		}
		return takePending
	case takeRunning:
		r.state = takeGone
		return takeRunning
	}
	return r.state
}

// Take moves up to max of the endpoint's queued jobs to worker; see core.JobStore. The
// statement picks the oldest with FOR UPDATE SKIP LOCKED, so that takers on every replica
// pass over each other's rows instead of waiting, and it takes for every taker of the endpoint
// waiting on this store at that moment (see takeReq). It records the workers' heartbeats with
// the take: a worker's first take on this store, and then one each beatEvery (5 s) at most, so
// that a worker taking jobs back to back does not write its heartbeat row with each.
func (s *Jobs) Take(ctx context.Context, endpoint, worker string, max int, now time.Time) ([]core.TakenJob, error) {
	if max <= 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &takeReq{worker: worker, max: max, now: now, ready: make(chan struct{})}
	if s.takes.join(endpoint, r) {
		s.leadTakes(endpoint)
	}
	select {
	case <-r.ready:
		if ctx.Err() == nil {
			return r.got, r.err
		}
	case <-ctx.Done():
	}
	switch s.takes.leave(endpoint, r) {
	case takeDone:
		s.untake(endpoint, worker, r.got, r.revs)
	case takeRunning: // the leader puts them back
	}
	return nil, ctx.Err()
}

// leadTakes runs one grouped take of the endpoint; if more takers arrived meanwhile, a new
// goroutine leads them, so that the leader's own caller is not held up by a steady stream of
// others. The statement outlives the callers' contexts: other callers wait on it.
func (s *Jobs) leadTakes(endpoint string) {
	batch := s.takes.next(endpoint)
	if batch == nil {
		return
	}
	if s.takeHook != nil {
		s.takeHook(len(batch))
	}
	s.runTakes(endpoint, batch)
	var back []*takeReq
	s.takes.mu.Lock()
	for _, r := range batch {
		if r.state == takeGone {
			back = append(back, r)
			continue
		}
		r.state = takeDone
		close(r.ready)
	}
	s.takes.mu.Unlock()
	for _, r := range back {
		s.untake(endpoint, r.worker, r.got, r.revs)
	}
	s.takes.mu.Lock()
	more := len(s.takes.eps[endpoint].pending) > 0
	if !more {
		delete(s.takes.eps, endpoint)
	}
	s.takes.mu.Unlock()
	if more {
		go s.leadTakes(endpoint)
	}
}

// runTakes takes the jobs of batch's takers in one statement and sets each one's result.
func (s *Jobs) runTakes(endpoint string, batch []*takeReq) {
	ctx := context.Background()
	var (
		slotWorkers []string
		slotTimes   []time.Time
		slotReq     []*takeReq
		beatWorkers []string
		beatTimes   []time.Time
		latest      time.Time
	)
	for _, r := range batch {
		for range r.max {
			slotWorkers, slotTimes, slotReq = append(slotWorkers, r.worker), append(slotTimes, r.now), append(slotReq, r)
		}
		if r.now.After(latest) {
			latest = r.now
		}
		if s.beats.due(r.worker, r.now) {
			if i := slices.Index(beatWorkers, r.worker); i >= 0 {
				beatTimes[i] = maxTime(beatTimes[i], r.now)
			} else {
				beatWorkers, beatTimes = append(beatWorkers, r.worker), append(beatTimes, r.now)
			}
		}
	}
	var rows pgx.Rows
	var err error
	switch {
	case len(batch) == 1 && len(beatWorkers) == 0:
		rows, err = s.db.Pool.Query(ctx, takeSQL, endpoint, batch[0].worker, batch[0].now, batch[0].max)
	case len(batch) == 1:
		rows, err = s.db.Pool.Query(ctx, takeBeatSQL, endpoint, batch[0].worker, batch[0].now, batch[0].max)
	default:
		rows, err = s.db.Pool.Query(ctx, takeManySQL, endpoint, slotWorkers, slotTimes, latest, len(slotWorkers), beatWorkers, beatTimes)
	}
	type taken struct {
		core.TakenJob
		qseq, rev int64
		slot      int64
	}
	var got []taken
	if err == nil {
		err = scanAll(rows, func(r pgx.Rows) error {
			var t taken
			extra := []any{&t.Input, &t.qseq}
			if len(batch) > 1 {
				extra = append(extra, &t.slot)
			}
			x, err := scanRow(r, extra...)
			t.Job, t.rev = x.job, x.rev
			got = append(got, t)
			return err
		})
	}
	if err != nil {
		err = fmt.Errorf("postgres: taking jobs of %s: %w", endpoint, err)
		for _, r := range batch {
			r.err = err
		}
		return
	}
	for i, w := range beatWorkers {
		s.beats.beaten(w, beatTimes[i])
	}
	slices.SortFunc(got, func(a, b taken) int { return cmp.Compare(a.qseq, b.qseq) })
	for _, t := range got {
		r := batch[0]
		if len(batch) > 1 {
			r = slotReq[t.slot-1]
		}
		r.got, r.revs = append(r.got, t.TakenJob), append(r.revs, t.rev)
		s.running.put(t.Job.ID, row{job: t.Job, rev: t.rev})
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// untake puts jobs taken for worker and never handed to it back at the head of the queue (their
// qseq unchanged), as they were: no retry is spent, as the worker never saw them. Only a job
// still as taken (its revision revs[i], held by worker) goes back: one that changed since (a
// lost-worker rule took it back, and it went on) is left as it is.
func (s *Jobs) untake(endpoint, worker string, jobs []core.TakenJob, revs []int64) {
	if len(jobs) == 0 {
		return
	}
	ids := make([]string, len(jobs))
	for i := range jobs {
		ids[i] = jobs[i].Job.ID
		s.running.drop(ids[i])
	}
	_, err := s.db.Pool.Exec(context.Background(), `UPDATE gantry_jobs j SET status = 'IN_QUEUE', worker_id = '',
		started_at = $4, deadline = NULL, output = NULL, rev = j.rev + 1
		FROM unnest($1::text[], $2::bigint[]) AS u(id, rev)
		WHERE j.id = u.id AND j.rev = u.rev AND j.status = 'IN_PROGRESS' AND j.worker_id = $3`, ids, revs, worker, time.Time{})
	if err != nil {
		// The jobs stay the worker's: the rules for lost workers and timeouts take them back.
		s.log.Error("putting back jobs taken for a worker that left", "worker", worker, "jobs", ids, "err", err)
		return
	}
	s.queued(endpoint)
}

// takeManySQL takes jobs for several takers at once: $1 endpoint, $2 the slots' workers and
// $3 their times (a taker of max n has n slots, in a row), $4 the latest time (jobs expired by
// then are not taken), $5 the number of slots, $6 and $7 the heartbeats due (workers and
// times, each worker once). The k-th oldest job picked goes to the k-th slot; each row
// returned names its slot. As takeSQL, its commit does not wait for the disk.
const takeManySQL = `WITH picked AS (
		SELECT id, row_number() OVER (ORDER BY qseq) AS n FROM (
			SELECT id, qseq FROM gantry_jobs WHERE endpoint = $1 AND status = 'IN_QUEUE' AND expires_at > $4
			ORDER BY qseq LIMIT $5 FOR UPDATE SKIP LOCKED) p),
	slots AS (
		SELECT w, t, n FROM unnest($2::text[], $3::timestamptz[]) WITH ORDINALITY AS s(w, t, n)),
	taken AS (
		UPDATE gantry_jobs j SET status = 'IN_PROGRESS', worker_id = slots.w, started_at = slots.t, output = NULL,
			deadline = CASE WHEN j.timeout_ms > 0 THEN slots.t + j.timeout_ms * interval '1 millisecond' END,
			rev = rev + 1
		FROM picked JOIN slots ON slots.n = picked.n WHERE j.id = picked.id
		RETURNING j.*, slots.n AS slot),
	beat AS (
		INSERT INTO gantry_job_heartbeats (worker, seen) SELECT * FROM unnest($6::text[], $7::timestamptz[])
		ON CONFLICT (worker) DO UPDATE SET seen = greatest(gantry_job_heartbeats.seen, excluded.seen))
	SELECT ` + jobCols + `, input, qseq, slot FROM taken, (SELECT set_config('synchronous_commit', 'off', true)) AS nosync`
