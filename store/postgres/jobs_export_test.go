package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/gantryhq/gantry/core"
)

// Parked returns how many takers wait on the endpoint in this store, having found nothing
// queued.
func (s *Jobs) Parked(endpoint string) int {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.hub.asleep[endpoint]
}

// The take statements, without and with the heartbeat.
const (
	TakeSQL     = takeSQL
	TakeBeatSQL = takeBeatSQL
)

// WriteGroup runs the statements as one group of durable writes (the store's group commit),
// and returns whether each returned a row, and its error.
func (s *Jobs) WriteGroup(ctx context.Context, stmts []string) ([]bool, []error) {
	reqs := make([]*writeReq, len(stmts))
	for i, sql := range stmts {
		reqs[i] = &writeReq{sql: sql, ready: make(chan struct{})}
	}
	s.writes.mu.Lock()
	s.writes.pending = append(s.writes.pending, reqs...)
	lead := !s.writes.leading
	s.writes.leading = true
	s.writes.mu.Unlock()
	if lead {
		s.writes.lead(ctx, s.runWrites)
	}
	ok, errs := make([]bool, len(reqs)), make([]error, len(reqs))
	for i, r := range reqs {
		<-r.ready
		ok[i], errs[i] = r.n > 0, r.err
	}
	return ok, errs
}

// Listening reports whether the key cache hears the changes (and so keeps what it reads).
func (c *KeyCache) Listening() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.listening
}

// ListQuery returns List's statement for the filter, and its arguments.
func ListQuery(f core.JobFilter) (string, []any, error) { return listQuery(f) }

// OnTake makes each grouped take call f with its number of takers before its statement runs
// (f may block: the takers that arrive meanwhile make the next group).
func (s *Jobs) OnTake(f func(takers int)) { s.takeHook = f }

// Taking reports how many takers of the endpoint wait for a grouped take or are in one.
func (s *Jobs) Taking(endpoint string) int {
	s.takes.mu.Lock()
	defer s.takes.mu.Unlock()
	if tg := s.takes.eps[endpoint]; tg != nil {
		return len(tg.pending)
	}
	return 0
}

// TakesRunning reports whether a grouped take of the endpoint runs, or puts back jobs.
func (s *Jobs) TakesRunning(endpoint string) bool {
	s.takes.mu.Lock()
	defer s.takes.mu.Unlock()
	return s.takes.eps[endpoint] != nil
}

// Untake puts back jobs taken for worker at their revisions, as a grouped take does for a
// taker that left.
func (s *Jobs) Untake(endpoint, worker string, jobs []core.TakenJob, revs []int64) {
	s.untake(endpoint, worker, jobs, revs)
}

// DropPast drops the partitions of gantry_jobs_ended whose range ends at or before horizon,
// as Expire does once the horizon passes them.
func (s *Jobs) DropPast(ctx context.Context, horizon time.Time) error {
	return s.parts.dropPast(ctx, s.db, horizon)
}

// DropLater reports whether DropPast's error says only that the drop waits for other
// transactions and must be tried again.
func DropLater(err error) bool { return errors.Is(err, errDropLater) }
