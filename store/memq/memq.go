// Package memq is the in-process job store: it implements core.JobStore over a core.JobRecords
// (Pebble's records, or an in-memory map for tests) with the index, queues and wake-ups held in
// memory. It suits one process; a shared store (PostgreSQL) meets the same contract across
// replicas.
//
// Memory holds an index entry per live job (status, endpoint, expiry, queue order), free of
// pointers but for the rarely set extras, in 1024 shards keyed by core.JobKey. A million queued
// jobs cost a million small entries that the garbage collector need not scan, not a million
// records. The record of a running job is attached to its entry, and the records and inputs of
// queued jobs are kept as hot copies while HotBytes allows, so that most takes and posts read
// nothing from disk. Each endpoint also keeps its jobs by owner and Seq, 24 pointer-free bytes
// a job, so that a page of a job list costs the page, not the backlog (see List).
package memq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/core"
)

// DefaultHotBytes bounds the records and inputs of queued jobs kept in memory (bytes), so
// that most takes need no disk read: the head of a queue is what workers take next.
const DefaultHotBytes = 16 << 20

// hotRecordOverhead approximates a record's memory beside its input (bytes).
const hotRecordOverhead = 512

// Options configure a Store.
type Options struct {
	// Clock is the time Open compares expiry against; nil = the system clock.
	Clock core.Clock
	// HotBytes bounds the hot copies of queued jobs (bytes); 0 = DefaultHotBytes, < 0 = none.
	HotBytes int64
	// Log reports records it cannot read or write; nil = slog.Default().
	Log *slog.Logger
}

// Store is the in-process job store. Open it with Open.
type Store struct {
	rec      core.JobRecords
	hotMax   int64
	hotBytes atomic.Int64
	chunkSeq atomic.Int64 // the last stream chunk's Seq: one order for every job, every run
	seq      atomic.Uint64
	log      *slog.Logger

	shards [1024]shard

	epMu  sync.RWMutex
	epIDs map[string]uint32
	eps   []*endpoint // by interned id

	dmu      sync.Mutex
	expiry   deadlines // ExpiresAt of every live job (stale ones skipped)
	timeouts deadlines // execution timeouts of running jobs

	workers workers

	listVisits atomic.Int64 // index entries List looked at, for tests

	listeners atomic.Pointer[[]*listener]
	lmu       sync.Mutex // serialises changes to listeners
}

type shard struct {
	mu     sync.Mutex
	jobs   map[core.JobKey]slot
	extras map[core.JobKey]*extra // of the jobs whose slot says it has extras; nil until one does
}

// slot is a job's index entry, kept by value in its shard's map: 16 bytes and no pointer, so
// that the garbage collector never scans the index. With a million queued jobs, an index
// holding pointers made each mark phase over 100 ms long, slowing every request it overlapped
// (a /run tail that grew with the backlog). The few jobs with extras keep them in their
// shard's extras map.
type slot struct {
	expiresAt int64  // Unix nanoseconds
	meta      uint64 // packed: seq, endpoint, state, lowPriority, has-extras (see newEntry)
}

// entry is a slot read under its shard's lock, with its extras.
type entry struct {
	slot
	x *extra // nil for most queued jobs
}

// The fields packed in slot.meta, from the lowest bit: lowPriority (1 bit), has-extras (1),
// state (3), the interned endpoint id (20: a million endpoints) and the insertion order, Seq
// (39: half a trillion jobs).
const (
	hasExtras  = 1 << 1
	stateShift = 2
	epShift    = 5
	seqShift   = 25
	maxEp      = 1<<(seqShift-epShift) - 1
	maxSeq     = 1<<(64-seqShift) - 1
)

func newEntry(seq uint64, expiresAt int64, ep uint32, st state, low bool) entry {
	m := seq<<seqShift | uint64(ep)<<epShift | uint64(st)<<stateShift
	if low {
		m |= 1
	}
	return entry{slot: slot{expiresAt: expiresAt, meta: m}}
}

func (e *slot) seq() uint64  { return e.meta >> seqShift }
func (e *slot) ep() uint32   { return uint32(e.meta>>epShift) & maxEp }
func (e *slot) state() state { return state(e.meta>>stateShift) & 7 }
func (e *slot) low() bool    { return e.meta&1 == 1 }

func (e *slot) setState(s state) {
	e.meta = e.meta&^(7<<stateShift) | uint64(s)<<stateShift
}

// extra holds what few jobs have at a time.
type extra struct {
	// rec is the record of a running job (attached), or a queued job's hot copy (hot > 0).
	rec   *core.Job
	input []byte // a hot copy's input
	hot   int64  // bytes this hot copy counts against HotBytes; 0 = not a hot copy
	// mem is the input of a runsync job kept in memory only (see Insert), until KeepInput or
	// the job's end; nil once stored or dropped.
	mem []byte

	chunks     []core.StreamChunk // unread stream chunks
	chunkBytes int
	kept       []core.StreamChunk // drained chunks still readable to PeekChunks
	keptBytes  int
	ended      chan struct{} // closed when the job ends or is removed; made when someone waits
	changed    chan struct{} // closed on a chunk or the end, then replaced; made when a reader waits
}

func (x *extra) empty() bool {
	return x.rec == nil && x.mem == nil && x.chunks == nil && x.kept == nil && (x.ended == nil || x.ended == closed) && x.changed == nil
}

// state is a job's status in the index.
type state uint8

const (
	stQueued state = iota + 1
	stRunning
	stCompleted
	stFailed
	stCancelled
	stTimedOut
)

var stateNames = [...]core.JobStatus{stQueued: core.InQueue, stRunning: core.InProgress, stCompleted: core.Completed,
	stFailed: core.Failed, stCancelled: core.Cancelled, stTimedOut: core.TimedOut}

func (s state) status() core.JobStatus { return stateNames[s] }
func (s state) terminal() bool         { return s >= stCompleted }

func stateOf(s core.JobStatus) state {
	for i, n := range stateNames {
		if n == s && i > 0 {
			return state(i)
		}
	}
	return 0
}

// Open returns a store over recs, loading the jobs they hold: queued jobs are queued again in
// their insertion order, running ones stay held by their workers (whose heartbeat starts at
// Open), and expired ones are deleted.
func Open(recs core.JobRecords, o Options) (*Store, error) {
	s := &Store{rec: recs, log: cmp.Or(o.Log, slog.Default()), epIDs: map[string]uint32{}}
	s.hotMax = o.HotBytes
	if s.hotMax == 0 {
		s.hotMax = DefaultHotBytes
	}
	clock := o.Clock
	if clock == nil {
		clock = core.SystemClock{}
	}
	s.workers.init()
	for i := range s.shards {
		s.shards[i].jobs = map[core.JobKey]slot{}
	}
	if err := s.load(clock.Now()); err != nil {
		return nil, err
	}
	return s, nil
}

// load builds the index from the stored records.
func (s *Store) load(now time.Time) error {
	type found struct {
		key core.JobKey
		rec *core.Job
	}
	var all []found
	var expired []string
	var syncs []int // unfinished runsync jobs, by index in all
	err := s.rec.ScanJobs(func(rec *core.Job) {
		s.seq.Store(max(s.seq.Load(), rec.Seq))
		key, ok := core.ParseJobKey(rec.ID)
		if !ok || !now.Before(rec.ExpiresAt) {
			expired = append(expired, rec.ID)
			return
		}
		all = append(all, found{key, rec})
		if rec.Sync && !rec.Status.Terminal() {
			syncs = append(syncs, len(all)-1)
		}
	})
	if err != nil {
		return fmt.Errorf("reading stored jobs: %w", err)
	}
	// An unfinished runsync job whose input was never stored (it lived in memory while its
	// runsync waited, and the process ended first) cannot run: its caller got no answer and
	// no id, and the input is gone. It is deleted.
	for _, i := range syncs {
		if _, err := s.rec.Input(all[i].rec.ID); errors.Is(err, core.ErrNotFound) {
			s.log.Warn("deleting an unfinished runsync job whose input was kept in memory only", "job", all[i].rec.ID)
			expired = append(expired, all[i].rec.ID)
			all[i].rec = nil
		} else if err != nil {
			return fmt.Errorf("reading job %s's input: %w", all[i].rec.ID, err)
		}
	}
	all = slices.DeleteFunc(all, func(f found) bool { return f.rec == nil })
	slices.SortFunc(all, func(a, b found) int { return cmp.Compare(a.rec.Seq, b.rec.Seq) })
	for _, f := range all {
		rec := f.rec
		ep := s.endpoint(rec.Endpoint)
		if rec.Seq > maxSeq || ep.id > maxEp {
			return fmt.Errorf("job %s: seq %d or endpoint %d past what the index holds", rec.ID, rec.Seq, ep.id)
		}
		e := newEntry(rec.Seq, rec.ExpiresAt.UnixNano(), ep.id, stateOf(rec.Status), rec.Policy.LowPriority)
		if e.state() == 0 {
			return fmt.Errorf("job %s has an unknown status %q", rec.ID, rec.Status)
		}
		ep.count(0, e.state(), e.low())
		switch e.state() {
		case stQueued:
			ep.push(f.key, rec.QueuedAt.UnixNano(), ep.leaves.Load())
		case stRunning:
			// Its key keeps its place in the queue, skipped while the job runs: a restart
			// that puts it back (its worker died with the server) runs it in its turn.
			ep.push(f.key, rec.QueuedAt.UnixNano(), ep.leaves.Load())
			ep.leaves.Add(1) // a key of a job not queued: the queue is not clean
			e.x = &extra{rec: rec}
			s.workers.take(rec.WorkerID, f.key, now.UnixNano())
			s.scheduleTimeout(f.key, rec)
		}
		s.shard(f.key).store(f.key, &e)
		ep.lists.add(rec.Owner, rec.Seq, f.key, e.state().terminal())
		s.schedule(&s.expiry, f.key, e.expiresAt)
	}
	for _, id := range expired {
		if err := s.rec.DeleteJob(id); err != nil && !errors.Is(err, core.ErrNotFound) {
			return fmt.Errorf("deleting expired job %s: %w", id, err)
		}
	}
	return nil
}

func (s *Store) shard(k core.JobKey) *shard {
	return &s.shards[(uint16(k[0])<<8|uint16(k[1]))%uint16(len(s.shards))] // the key is random
}

// lock returns the key's shard, locked, and its entry.
func (s *Store) lock(k core.JobKey) (*shard, entry, bool) {
	sh := s.shard(k)
	sh.mu.Lock()
	sl, ok := sh.jobs[k]
	return sh, sh.entry(k, sl), ok
}

// entry returns a slot with its extras. The shard is locked.
func (sh *shard) entry(k core.JobKey, sl slot) entry {
	e := entry{slot: sl}
	if sl.meta&hasExtras != 0 {
		e.x = sh.extras[k]
	}
	return e
}

// store writes the entry back, its extras apart (dropped when empty). The shard is locked.
func (sh *shard) store(k core.JobKey, e *entry) {
	if e.x != nil && e.x.empty() {
		e.x = nil
	}
	switch {
	case e.x != nil:
		if sh.extras == nil {
			sh.extras = map[core.JobKey]*extra{}
		}
		sh.extras[k] = e.x
		e.meta |= hasExtras
	case e.meta&hasExtras != 0:
		delete(sh.extras, k)
		e.meta &^= hasExtras
	}
	sh.jobs[k] = e.slot
}

// remove drops the entry and its extras. The shard is locked.
func (sh *shard) remove(k core.JobKey, e *entry) {
	if e.meta&hasExtras != 0 {
		delete(sh.extras, k)
	}
	delete(sh.jobs, k)
}

// put writes the entry back and unlocks its shard.
func (sh *shard) put(k core.JobKey, e entry) {
	sh.store(k, &e)
	sh.mu.Unlock()
}

func (e *entry) extra() *extra {
	if e.x == nil {
		e.x = &extra{}
	}
	return e.x
}

// record returns the job's record: the attached one or the hot copy (shared: copy it before
// changing it), or one read from the records. The shard is locked.
func (s *Store) record(k core.JobKey, e *entry) (*core.Job, error) {
	if e.x != nil && e.x.rec != nil {
		return e.x.rec, nil
	}
	return s.rec.GetJob(k.String())
}

// dropHot releases a queued job's hot copy. The shard is locked.
func (s *Store) dropHot(e *entry) {
	if e.x != nil && e.x.hot > 0 {
		s.hotBytes.Add(-e.x.hot)
		e.x.rec, e.x.input, e.x.hot = nil, nil, 0
	}
}

// Insert stores a new queued job; see core.JobStore.
func (s *Store) Insert(ctx context.Context, rec core.Job, input []byte, durable bool) (core.Job, error) {
	key, ok := core.ParseJobKey(rec.ID)
	if !ok {
		return core.Job{}, fmt.Errorf("memq: job id %q is not one core.JobKey makes", rec.ID)
	}
	if rec.Status != core.InQueue {
		return core.Job{}, fmt.Errorf("memq: inserting job %s as %s; want %s", rec.ID, rec.Status, core.InQueue)
	}
	rec.Seq = s.seq.Add(1)
	h := new(core.Job)
	*h = rec
	// A runsync job's input stays in memory while its runsync waits: the request's own buffer,
	// not a second copy in the records' write batch and memtable. KeepInput stores it when
	// the job must outlive the wait; its end stores it when a retry or webhook may read it.
	memOnly := !durable && rec.Sync
	stored := input
	if memOnly {
		stored = nil
	}
	if err := s.rec.PutJob(h, stored, durable); err != nil {
		return core.Job{}, err
	}
	ep := s.endpoint(rec.Endpoint)
	if rec.Seq > maxSeq || ep.id > maxEp {
		return core.Job{}, fmt.Errorf("memq: job %s: seq %d or endpoint %d past what the index holds", rec.ID, rec.Seq, ep.id)
	}
	e := newEntry(rec.Seq, rec.ExpiresAt.UnixNano(), ep.id, stQueued, rec.Policy.LowPriority)
	if size := int64(len(stored) + hotRecordOverhead); s.hotMax > 0 && s.hotBytes.Add(size) <= s.hotMax {
		e.x = &extra{rec: h, input: stored, hot: size}
	} else if s.hotMax > 0 {
		s.hotBytes.Add(-size)
	}
	if memOnly {
		e.extra().mem = input
	}
	sh := s.shard(key)
	leaves := ep.leaves.Load() // before the job can leave: see endpoint
	sh.mu.Lock()
	if _, dup := sh.jobs[key]; dup {
		sh.mu.Unlock()
		s.dropHot(&e)
		return core.Job{}, fmt.Errorf("memq: job %s exists", rec.ID)
	}
	sh.store(key, &e)
	ep.lists.add(rec.Owner, rec.Seq, key, false) // under the shard's lock: before Expire may find the job
	sh.mu.Unlock()
	ep.count(0, stQueued, e.low())
	s.schedule(&s.expiry, key, e.expiresAt)
	s.enqueue(ep, key, rec.QueuedAt.UnixNano(), leaves)
	return rec, nil
}

// Get returns a job's record; see core.JobStore.
func (s *Store) Get(ctx context.Context, id string) (core.Job, error) {
	key, ok := core.ParseJobKey(id)
	if !ok {
		return core.Job{}, core.ErrNotFound
	}
	sh, e, ok := s.lock(key)
	defer sh.mu.Unlock()
	if !ok {
		return core.Job{}, core.ErrNotFound
	}
	rec, err := s.record(key, &e)
	if err != nil {
		return core.Job{}, err
	}
	return *rec, nil
}

// Input returns a job's input; see core.JobStore.
func (s *Store) Input(ctx context.Context, id string) ([]byte, error) {
	key, ok := core.ParseJobKey(id)
	if !ok {
		return nil, core.ErrNotFound
	}
	sh, e, ok := s.lock(key)
	if !ok {
		sh.mu.Unlock()
		return nil, core.ErrNotFound
	}
	if e.x != nil && (e.x.hot > 0 || e.x.mem != nil) {
		in := e.x.input
		if e.x.mem != nil {
			in = e.x.mem
		}
		sh.mu.Unlock()
		return in, nil
	}
	sh.mu.Unlock()
	return s.rec.Input(id)
}

// Update applies a change allowed from the job's status; see core.JobStore.
func (s *Store) Update(ctx context.Context, id string, from core.StatusSet, change func(*core.Job) error, durable bool) (core.Job, error) {
	key, ok := core.ParseJobKey(id)
	if !ok {
		return core.Job{}, core.ErrNotFound
	}
	sh, e, ok := s.lock(key)
	if !ok {
		sh.mu.Unlock()
		return core.Job{}, core.ErrNotFound
	}
	out, requeued, err := s.update(key, &e, from, change)
	var ep *endpoint
	var leaves uint64
	if requeued {
		ep = s.endpointByID(e.ep())
		leaves = ep.leaves.Load() // before the shard's lock lets the job leave again
	}
	sh.put(key, e)
	if err != nil {
		return core.Job{}, err
	}
	if requeued {
		s.enqueue(ep, key, out.QueuedAt.UnixNano(), leaves)
	}
	if durable {
		if err := s.rec.SyncJobs(); err != nil {
			return core.Job{}, err
		}
	}
	return out, nil
}

// KeepInput stores a runsync job's input that Insert kept in memory, and syncs it: the job
// must outlive its runsync's wait. See core.InputKeeper.
func (s *Store) KeepInput(ctx context.Context, id string) error {
	key, ok := core.ParseJobKey(id)
	if !ok {
		return core.ErrNotFound
	}
	sh, e, ok := s.lock(key)
	if !ok || e.x == nil || e.x.mem == nil {
		sh.mu.Unlock()
		return nil // gone, stored already, or ended
	}
	rec, err := s.record(key, &e)
	if err == nil {
		err = s.rec.PutJob(rec, e.x.mem, false)
	}
	if err == nil {
		e.x.mem = nil
	}
	sh.put(key, e)
	if err != nil {
		return err
	}
	return s.rec.SyncJobs()
}

// update applies change to a locked entry. It reports whether the job went back to the queue:
// the caller enqueues it once the shard is unlocked.
func (s *Store) update(key core.JobKey, e *entry, from core.StatusSet, change func(*core.Job) error) (core.Job, bool, error) {
	st := e.state()
	if !from.Has(st.status()) {
		return core.Job{}, false, &core.StateError{ID: key.String(), Status: st.status()}
	}
	rec, err := s.record(key, e) // the store's own: attached, a hot copy, or just read
	if err != nil {
		return core.Job{}, false, err
	}
	// change works on rec itself, which is restored if the change is refused: a copy to work
	// on would escape to the heap through change, one allocation per update.
	was := *rec
	if err := change(rec); err != nil {
		*rec = was
		return core.Job{}, false, err
	}
	to := stateOf(rec.Status)
	switch {
	case to == 0:
		err = fmt.Errorf("memq: job %s: unknown status %q", was.ID, rec.Status)
	case to == stRunning && st != stRunning:
		err = fmt.Errorf("memq: job %s: only Take moves a job %s", was.ID, core.InProgress)
	case rec.ID != was.ID || rec.Endpoint != was.Endpoint || rec.Owner != was.Owner || rec.Seq != was.Seq:
		err = fmt.Errorf("memq: job %s: a change may not alter its id, endpoint, owner or seq", was.ID)
	default:
		var input []byte // a runsync job's input kept in memory, stored at its end when it may be read later
		if e.x != nil && e.x.mem != nil && to.terminal() && (to == stFailed || to == stTimedOut || rec.Webhook != "") {
			input = e.x.mem // a retry runs it again; a webhook carries it
		}
		err = s.rec.PutJob(rec, input, false) // the caller syncs once unlocked
	}
	if err != nil {
		*rec = was
		return core.Job{}, false, err
	}
	ep := s.endpointByID(e.ep())
	if st != to {
		ep.count(st, to, e.low())
	}
	if st == stRunning && to != stRunning {
		s.workers.release(was.WorkerID, key)
	}
	if st.terminal() != to.terminal() { // it ended, or was queued again after its end
		ep.lists.move(rec.Owner, rec.Seq, key, to.terminal())
	}
	if exp := rec.ExpiresAt.UnixNano(); exp != e.expiresAt {
		e.expiresAt = exp
		s.schedule(&s.expiry, key, exp)
	}
	e.setState(to)
	switch {
	case to == stRunning: // progress: the record stays attached
	case to == stQueued && st == stQueued && e.x != nil && e.x.hot > 0: // the hot copy, changed
	default:
		s.dropHot(e)
		if e.x != nil {
			e.x.rec = nil // detached: the record lives in the store
		}
	}
	requeued := to == stQueued && st != stQueued
	if requeued && e.x != nil {
		e.x.chunks, e.x.chunkBytes = nil, 0
		e.x.kept, e.x.keptBytes = nil, 0
		if e.x.ended != nil && st.terminal() {
			e.x.ended = nil // a new run: a new end
		}
	}
	if to.terminal() && !st.terminal() {
		if e.x != nil {
			e.x.mem = nil // stored above, or needed by no one
		}
		s.wake(e)
	}
	return *rec, requeued, nil
}

// wake closes the end and change channels of a job that ended or was removed. The shard is
// locked.
func (s *Store) wake(e *entry) {
	if e.x == nil {
		return
	}
	if e.x.ended != nil {
		close(e.x.ended)
		e.x.ended = closed
	}
	if e.x.changed != nil {
		close(e.x.changed)
		e.x.changed = nil
	}
}

// closed is a channel already closed: the end channel of a job that ended.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

var (
	_ core.JobStore      = (*Store)(nil)
	_ core.CountingStore = (*Store)(nil)
	_ core.InputKeeper   = (*Store)(nil)
)
