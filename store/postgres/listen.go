package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Wake-ups across replicas.
//
// A store wakes its own waiters at once, in process, and tells the other replicas through
// NOTIFY on the channel gantry_jobs. Notifies are coalesced: one notifier goroutine per store
// sends what is pending, one NOTIFY at a time and at most one each NotifyEvery (5 ms), each
// carrying every endpoint and job that changed since the last (an endpoint appears once, with how many of its jobs were queued), so
// a burst of inserts costs a handful of NOTIFYs, not one each. A queued job wakes one parked
// taker of its endpoint per replica, not all of them. Each store LISTENs on one dedicated
// connection. A slow poll (PollEvery) looks at the tables for the waiters a lost notify would
// leave parked: a lost notify costs latency, never a job.
//
// Payload lines: "s <store id>" first (a store ignores its own), then "a <endpoint> <n>" (n
// jobs were queued there) or "j <job id>" (the job ended, was removed, or has new chunks).

const channel = "gantry_jobs"

// maxPayload keeps a NOTIFY below PostgreSQL's 8000-byte limit.
const maxPayload = 7900

// hub holds the waiters of this store. A job's waiters ("j:" id) share a channel that a
// wake-up closes. An endpoint's parked takers queue, each on its own channel: a job queued
// wakes one of them, not all (a herd of takers, all but one finding nothing, would cost a
// query each per job).
type hub struct {
	mu      sync.Mutex
	waiting map[string]*waitKey
	parked  map[string][]chan struct{} // endpoint -> its parked takers, longest parked first
	asleep  map[string]int             // endpoint -> parked takers that found nothing queued

	listeners atomic.Pointer[[]*availListener]
	lmu       sync.Mutex // serialises changes to listeners
}

type waitKey struct {
	ch chan struct{}
	n  int // waiters holding ch
}

type availListener struct {
	ctx context.Context
	fn  func(endpoint string)
}

func (h *hub) init() {
	h.waiting = map[string]*waitKey{}
	h.parked = map[string][]chan struct{}{}
	h.asleep = map[string]int{}
}

// sleep counts a parked taker that found nothing queued and waits (n = 1), or that stopped
// waiting (n = -1).
func (h *hub) sleep(endpoint string, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.asleep[endpoint] += n; h.asleep[endpoint] == 0 {
		delete(h.asleep, endpoint)
	}
}

// park queues a taker of the endpoint; unpark must follow.
func (h *hub) park(endpoint string) chan struct{} {
	ch := make(chan struct{})
	h.mu.Lock()
	h.parked[endpoint] = append(h.parked[endpoint], ch)
	h.mu.Unlock()
	return ch
}

// unpark removes the taker. A taker that was woken but leaves without taking (its context
// ended at the same moment) hands its wake-up on to the next.
func (h *hub) unpark(endpoint string, ch chan struct{}, took bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.parked[endpoint]
	for i, c := range q {
		if c == ch {
			q = append(q[:i:i], q[i+1:]...)
			if len(q) == 0 {
				delete(h.parked, endpoint)
			} else {
				h.parked[endpoint] = q
			}
			return
		}
	}
	if !took { // woken, and leaving
		h.wakeParked(endpoint, 1)
	}
}

// wakeParked wakes up to n of the endpoint's parked takers (n < 0: all). h.mu is held.
func (h *hub) wakeParked(endpoint string, n int) {
	q := h.parked[endpoint]
	if n < 0 || n > len(q) {
		n = len(q)
	}
	for _, ch := range q[:n] {
		close(ch)
	}
	if n == len(q) {
		delete(h.parked, endpoint)
	} else {
		h.parked[endpoint] = q[n:]
	}
}

// enter returns the channel the next wake-up of key closes; leave must follow.
func (h *hub) enter(key string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.waiting[key]
	if w == nil {
		w = &waitKey{ch: make(chan struct{})}
		h.waiting[key] = w
	}
	w.n++
	return w.ch
}

func (h *hub) leave(key string, ch chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.waiting[key]; w != nil && w.ch == ch {
		if w.n--; w.n == 0 {
			delete(h.waiting, key)
		}
	}
}

// wake closes key's channel: its waiters return or look again.
func (h *hub) wake(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.waiting[key]; w != nil {
		close(w.ch)
		delete(h.waiting, key)
	}
}

// wakeAll wakes every waiter (the listener lost its connection: notifies may have been lost).
func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, w := range h.waiting {
		close(w.ch)
		delete(h.waiting, k)
	}
	for ep := range h.parked {
		h.wakeParked(ep, -1)
	}
}

// keys returns the endpoints and jobs waited on.
func (h *hub) keys() (endpoints, jobs []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.waiting {
		if id, ok := strings.CutPrefix(k, "j:"); ok {
			jobs = append(jobs, id)
		}
	}
	for ep := range h.parked {
		endpoints = append(endpoints, ep)
	}
	return endpoints, jobs
}

// available tells n of the endpoint's parked takers (n < 0: all), and its listeners, that a
// job may be available there.
func (h *hub) available(endpoint string, n int) {
	h.mu.Lock()
	h.wakeParked(endpoint, n)
	h.mu.Unlock()
	if ls := h.listeners.Load(); ls != nil {
		for _, l := range *ls {
			if l.ctx.Err() == nil {
				l.fn(endpoint)
			}
		}
	}
}

// queued follows a job queued on this store: local wake-ups now, the other replicas' by notify.
func (s *Jobs) queued(endpoint string) {
	s.hub.available(endpoint, 1)
	s.notify.queued(endpoint)
}

// jobChanged follows a job that ended, was removed or has new chunks.
func (s *Jobs) jobChanged(id string) {
	s.hub.wake("j:" + id)
	s.notify.add("j " + id)
}

// notifier sends the pending notifies, coalesced: "a <endpoint> <n>" says n jobs were queued
// there since the last notify (the listener wakes as many parked takers), "j <id>" that a job
// ended, was removed or has new chunks.

type notifier struct {
	s       *Jobs
	mu      sync.Mutex
	pending map[string]struct{}
	counts  map[string]int // jobs queued per endpoint since the last notify
	kick    chan struct{}
}

func newNotifier(s *Jobs) *notifier {
	return &notifier{s: s, pending: map[string]struct{}{}, counts: map[string]int{}, kick: make(chan struct{}, 1)}
}

func (n *notifier) add(line string) {
	n.mu.Lock()
	n.pending[line] = struct{}{}
	n.mu.Unlock()
	n.wake()
}

func (n *notifier) queued(endpoint string) {
	n.mu.Lock()
	n.counts[endpoint]++
	n.mu.Unlock()
	n.wake()
}

func (n *notifier) wake() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// run sends what is pending until ctx ends: while one NOTIFY is in flight, the next gathers.
func (n *notifier) run(ctx context.Context) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.kick:
		}
		// At most one NOTIFY each NotifyEvery: the first after a pause goes at once, those of
		// a burst gather (a NOTIFY takes a lock every commit in the database waits on).
		if wait := time.Until(last.Add(n.s.o.NotifyEvery)); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		last = time.Now()
		n.mu.Lock()
		lines := make([]string, 0, len(n.pending)+len(n.counts))
		for l := range n.pending {
			lines = append(lines, l)
		}
		for ep, k := range n.counts {
			lines = append(lines, "a "+ep+" "+strconv.Itoa(k))
		}
		clear(n.pending)
		clear(n.counts)
		n.mu.Unlock()
		for _, p := range payloads("s "+n.s.self, lines) {
			for {
				_, err := n.s.db.Pool.Exec(ctx, "SELECT pg_notify($1, $2)", channel, p)
				if err == nil || ctx.Err() != nil {
					break
				}
				n.s.log.Error("notifying the other replicas", "err", err)
				select { // the other replicas' slow poll covers the wait
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}
}

// payloads packs lines behind head into payloads of at most maxPayload bytes.
func payloads(head string, lines []string) []string {
	var out []string
	var b strings.Builder
	for _, l := range lines {
		if len(l)+len(head)+2 > maxPayload {
			continue // an endpoint name or id this long is none of ours
		}
		if b.Len() > 0 && b.Len()+1+len(l) > maxPayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() == 0 {
			b.WriteString(head)
		}
		b.WriteByte('\n')
		b.WriteString(l)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// listener is the store's LISTEN connection.
type listener struct {
	s    *Jobs
	conn *pgx.Conn
}

// listen connects and LISTENs.
func (s *Jobs) listen(ctx context.Context) (*listener, error) {
	l := &listener{s: s}
	if err := l.connect(ctx); err != nil {
		return nil, fmt.Errorf("postgres: listening for job wake-ups: %w", err)
	}
	return l, nil
}

func (l *listener) connect(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.s.db.Pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		_ = conn.Close(context.Background())
		return err
	}
	l.conn = conn
	return nil
}

// run hands notifies to the hub until ctx ends, connecting again when the connection fails.
func (l *listener) run(ctx context.Context) {
	defer func() {
		if l.conn != nil {
			_ = l.conn.Close(context.Background())
		}
	}()
	for ctx.Err() == nil {
		if l.conn == nil {
			if err := l.connect(ctx); err != nil {
				if ctx.Err() == nil {
					l.s.log.Error("listening for job wake-ups", "err", err)
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			// Notifies sent while the connection was down are lost: everyone looks again.
			l.s.hub.wakeAll()
			l.s.resync(ctx)
		}
		n, err := l.conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				l.s.log.Error("listening for job wake-ups: the connection failed", "err", err)
			}
			_ = l.conn.Close(context.Background())
			l.conn = nil
			continue
		}
		l.s.heard(n.Payload)
	}
}

// heard applies a notify's payload.
func (s *Jobs) heard(payload string) {
	head, rest, _ := strings.Cut(payload, "\n")
	if head == "s "+s.self {
		return // ours: its wake-ups were local
	}
	for _, line := range strings.Split(rest, "\n") {
		switch kind, v, _ := strings.Cut(line, " "); kind {
		case "a":
			i := strings.LastIndexByte(v, ' ')
			if i < 0 {
				continue
			}
			k, err := strconv.Atoi(v[i+1:])
			if err != nil {
				continue
			}
			s.hub.available(v[:i], k)
		case "j":
			s.hub.wake("j:" + v)
		}
	}
}

// resync tells the ListenAvailable listeners of every endpoint with queued jobs, after the
// listener was disconnected.
func (s *Jobs) resync(ctx context.Context) {
	if ls := s.hub.listeners.Load(); ls == nil || len(*ls) == 0 {
		return
	}
	s.stats.mu.Lock()
	err := s.refreshStats(ctx)
	var eps []string
	for ep, st := range s.stats.byEp {
		if st.Queued > 0 {
			eps = append(eps, ep)
		}
	}
	s.stats.mu.Unlock()
	if err != nil {
		s.log.Error("reading which endpoints have queued jobs", "err", err)
	}
	for _, ep := range eps {
		s.hub.available(ep, -1)
	}
}

// poll is the slow fallback behind notifies: every PollEvery, it looks for the queued jobs and
// ended jobs that local waiters wait for, and for endpoints with newly queued jobs when
// ListenAvailable listeners exist. It asks nothing when no one waits.
func (s *Jobs) poll(ctx context.Context) {
	t := time.NewTicker(s.o.PollEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.running.prune()
		if err := s.pollOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("polling for job wake-ups", "err", err)
		}
	}
}

func (s *Jobs) pollOnce(ctx context.Context) error {
	endpoints, jobs := s.hub.keys()
	if len(endpoints) > 0 {
		rows, err := s.db.Pool.Query(ctx, `SELECT e FROM unnest($1::text[]) e WHERE EXISTS (
			SELECT 1 FROM gantry_jobs WHERE endpoint = e AND status = 'IN_QUEUE')`, endpoints)
		if err != nil {
			return err
		}
		eps, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		s.hub.mu.Lock()
		for _, ep := range eps {
			s.hub.wakeParked(ep, -1)
		}
		s.hub.mu.Unlock()
	}
	if len(jobs) > 0 {
		rows, err := s.db.Pool.Query(ctx, `SELECT id FROM unnest($1::text[]) id WHERE
			NOT EXISTS (SELECT 1 FROM gantry_jobs j WHERE j.id = id)
			OR EXISTS (SELECT 1 FROM gantry_job_chunks c WHERE c.job_id = id AND NOT c.delivered)`, jobs)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, id := range ids {
			s.hub.wake("j:" + id)
		}
	}
	if ls := s.hub.listeners.Load(); ls != nil && len(*ls) > 0 {
		s.stats.mu.Lock()
		err := s.refreshStats(ctx)
		var eps []string
		seen := s.pollSeen
		s.pollSeen = s.stats.maxSeq
		for ep, q := range s.stats.maxSeq {
			if q > seen[ep] && seen != nil {
				eps = append(eps, ep)
			}
		}
		s.stats.mu.Unlock()
		if err != nil {
			return err
		}
		for _, ep := range eps {
			if ls := s.hub.listeners.Load(); ls != nil {
				for _, l := range *ls {
					if l.ctx.Err() == nil {
						l.fn(ep)
					}
				}
			}
		}
	}
	return nil
}

// WaitAvailable waits for a job to be queued at the endpoint; see core.JobStore.
func (s *Jobs) WaitAvailable(ctx context.Context, endpoint string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ch := s.hub.park(endpoint)
	var queued bool
	err := s.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM gantry_jobs WHERE endpoint = $1 AND status = 'IN_QUEUE')`,
		endpoint).Scan(&queued)
	if err != nil || queued {
		s.hub.unpark(endpoint, ch, true) // a wake-up meanwhile is not handed on: this taker looks now
		if err != nil {
			return fmt.Errorf("postgres: looking for queued jobs of %s: %w", endpoint, err)
		}
		return nil
	}
	s.hub.sleep(endpoint, 1)
	defer s.hub.sleep(endpoint, -1)
	select {
	case <-ch:
		s.hub.unpark(endpoint, ch, true)
		return nil
	case <-ctx.Done():
		s.hub.unpark(endpoint, ch, false)
		return ctx.Err()
	}
}

// WaitEnded waits for the job's end; see core.JobStore.
func (s *Jobs) WaitEnded(ctx context.Context, id string) error { return s.waitJob(ctx, id, false) }

// WaitChunks waits for the job's end or an unread chunk; see core.JobStore.
func (s *Jobs) WaitChunks(ctx context.Context, id string) error { return s.waitJob(ctx, id, true) }

func (s *Jobs) waitJob(ctx context.Context, id string, chunks bool) error {
	key := "j:" + id
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		ch := s.hub.enter(key)
		var done bool
		err := s.db.Pool.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM gantry_jobs WHERE id = $1)
			OR ($2 AND EXISTS (SELECT 1 FROM gantry_job_chunks WHERE job_id = $1 AND NOT delivered))`, id, chunks).Scan(&done)
		if err != nil || done {
			s.hub.leave(key, ch)
			if err != nil {
				return fmt.Errorf("postgres: looking at job %s: %w", id, err)
			}
			return nil
		}
		select {
		case <-ch:
			s.hub.leave(key, ch)
		case <-ctx.Done():
			s.hub.leave(key, ch)
			return ctx.Err()
		}
	}
}

// ListenAvailable calls fn with each endpoint where a job may have become available, until
// ctx ends; see core.JobStore. Inserts on this store call it at once, the other replicas'
// through their notifies, and the slow poll covers lost notifies.
func (s *Jobs) ListenAvailable(ctx context.Context, fn func(endpoint string)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l := &availListener{ctx: ctx, fn: fn}
	s.hub.setListeners(func(ls []*availListener) []*availListener { return append(ls, l) })
	context.AfterFunc(ctx, func() {
		s.hub.setListeners(func(ls []*availListener) []*availListener {
			out := make([]*availListener, 0, len(ls))
			for _, x := range ls {
				if x != l {
					out = append(out, x)
				}
			}
			return out
		})
	})
	return nil
}

func (h *hub) setListeners(f func([]*availListener) []*availListener) {
	h.lmu.Lock()
	defer h.lmu.Unlock()
	var cur []*availListener
	if p := h.listeners.Load(); p != nil {
		cur = *p
	}
	next := f(append([]*availListener(nil), cur...))
	h.listeners.Store(&next)
}
