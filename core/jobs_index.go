package core

import "sync"

// This file is the job index: a pointer-free entry per live job in 1024 shards, hot copies of
// queued records, and the locked-entry helpers the operations use.

type shard struct {
	mu   sync.Mutex
	jobs map[JobKey]liveJob
	// extras holds the jobExtra of the few jobs that have one (liveJob.hasX), apart from jobs,
	// so that jobs holds no pointers: the garbage collector then never scans the index, which
	// with a million queued jobs made each mark phase over 100 ms long, slowing every request
	// it overlapped (a /run tail that grew with the backlog). nil until a job needs it.
	extras map[JobKey]*jobExtra
}

// jobState is a job's status in the index.
type jobState uint8

const (
	stQueued jobState = iota + 1
	stRunning
	stCompleted
	stFailed
	stCancelled
	stTimedOut
)

var stateNames = [...]JobStatus{stQueued: InQueue, stRunning: InProgress, stCompleted: Completed,
	stFailed: Failed, stCancelled: Cancelled, stTimedOut: TimedOut}

func (s jobState) Status() JobStatus { return stateNames[s] }

func stateOf(s JobStatus) jobState {
	for i, n := range stateNames {
		if n == s && i > 0 {
			return jobState(i)
		}
	}
	return 0
}

// liveJob is a job's index entry, kept by value in its shard's map.
type liveJob struct {
	expiresAt int64  // Unix nanoseconds
	ep        uint32 // interned endpoint id
	state     jobState
	sync      bool // a runsync job: its state changes are not synced
	low       bool // policy.lowPriority: its wait does not scale the endpoint up
	hasX      bool // the job has a jobExtra in its shard's extras (most queued jobs do not)
}

// jobExtra holds what few jobs have at a time.
type jobExtra struct {
	// rec is the full record while a worker runs the job (read it from the store otherwise,
	// with Jobs.record).
	rec *Job
	// hot is the record and input of a queued job while the HotQueueBytes budget allows.
	hot *hotCopy
	// done is closed when the job ends; made only when someone waits.
	done   chan struct{}
	stream *streamState // made when a part arrives or a reader waits
}

// entry is a locked index entry: a copy of the liveJob whose changes unlock writes back.
type entry struct {
	liveJob
	x    *jobExtra // the job's extras, nil for most queued jobs
	key  JobKey
	sh   *shard
	gone bool // removed from the index
}

// entry returns the locked entry of an indexed job, with its extras. The shard is locked.
func (sh *shard) entry(key JobKey, lj liveJob) *entry {
	e := &entry{liveJob: lj, key: key, sh: sh}
	if lj.hasX {
		e.x = sh.extras[key]
	}
	return e
}

// store writes the entry back to the index (or drops its extras when it left the index),
// keeping the shard locked.
func (e *entry) store() {
	if x := e.x; x != nil && x.rec == nil && x.hot == nil && x.done == nil && x.stream == nil {
		e.x = nil
	}
	switch {
	case e.gone || e.x == nil:
		if e.hasX {
			delete(e.sh.extras, e.key)
			e.hasX = false
		}
	default:
		if e.sh.extras == nil {
			e.sh.extras = map[JobKey]*jobExtra{}
		}
		e.sh.extras[e.key] = e.x
		e.hasX = true
	}
	if !e.gone {
		e.sh.jobs[e.key] = e.liveJob
	}
}

func (e *entry) unlock() {
	e.store()
	e.sh.mu.Unlock()
}

func (e *entry) extra() *jobExtra {
	if e.x == nil {
		e.x = &jobExtra{}
	}
	return e.x
}

func (e *entry) status() JobStatus { return e.state.Status() }

// attached is the record attached to a running job, or nil.
func (e *entry) attached() *Job {
	if e.x == nil {
		return nil
	}
	return e.x.rec
}

type hotCopy struct {
	rec   *Job
	input []byte
	size  int64
}

// hotRecordOverhead approximates a record's memory beside its input.
const hotRecordOverhead = 512

// dropHot releases a job's hot copy. The shard is locked.
func (js *Jobs) dropHot(e *entry) {
	if e.x != nil && e.x.hot != nil {
		js.hotBytes.Add(-e.x.hot.size)
		e.x.hot = nil
	}
}

// ended returns a channel closed once the job ends. The shard is locked.
func (e *entry) ended() <-chan struct{} {
	x := e.extra()
	if x.done == nil {
		x.done = make(chan struct{})
		if e.status().Terminal() {
			close(x.done)
		}
	}
	return x.done
}

func (js *Jobs) shard(k JobKey) *shard {
	return &js.shards[(uint16(k[0])<<8|uint16(k[1]))%uint16(len(js.shards))] // the key is random
}

// epIntern returns the endpoint's interned id, adding it if new.
func (js *Jobs) epIntern(name string) uint32 {
	if id, ok := js.epFind(name); ok {
		return id
	}
	js.epMu.Lock()
	defer js.epMu.Unlock()
	if id, ok := js.epIDs[name]; ok {
		return id
	}
	id := uint32(len(js.epNames))
	js.epNames = append(js.epNames, name)
	js.epIDs[name] = id
	return id
}

func (js *Jobs) epFind(name string) (uint32, bool) {
	js.epMu.RLock()
	defer js.epMu.RUnlock()
	id, ok := js.epIDs[name]
	return id, ok
}

func (js *Jobs) epName(id uint32) string {
	js.epMu.RLock()
	defer js.epMu.RUnlock()
	return js.epNames[id]
}

// lookup returns the locked index entry of an endpoint's live job, or KindNotFound when it is
// lookup returns the locked index entry of an endpoint's live job, or KindNotFound when it is
// unknown, expired or another endpoint's. Call unlock on the entry when done.
func (js *Jobs) lookup(endpoint, id string) (*entry, error) {
	key, ok := ParseJobKey(id)
	epID, known := js.epFind(endpoint)
	if !ok || !known {
		return nil, notFound(id)
	}
	e := js.lock(key)
	if e == nil || e.ep != epID || js.clock.Now().UnixNano() >= e.expiresAt {
		if e != nil {
			e.sh.mu.Unlock()
		}
		return nil, notFound(id)
	}
	return e, nil
}

// lookupRef is lookup that also checks the job's owner (see JobRef) without taking the record
// from the entry: the attached record or hot copy answers when there is one, else the store.
func (js *Jobs) lookupRef(ref JobRef) (*entry, error) {
	e, err := js.lookup(ref.Endpoint, ref.ID)
	if err != nil || ref.Owner == "" {
		return e, err
	}
	owner := ""
	switch {
	case e.attached() != nil:
		owner = e.attached().Owner
	case e.x != nil && e.x.hot != nil:
		owner = e.x.hot.rec.Owner
	default:
		rec, err := js.store.GetJob(ref.ID)
		if err != nil {
			e.unlock()
			return nil, Internal("reading the job", err)
		}
		owner = rec.Owner
	}
	if owner != ref.Owner {
		e.unlock()
		return nil, notFound(ref.ID)
	}
	return e, nil
}

// owned checks a record read under the entry's lock against the ref's owner.
func owned(ref JobRef, rec *Job) error {
	if ref.Owner != "" && rec.Owner != ref.Owner {
		return notFound(ref.ID)
	}
	return nil
}

// lock returns the locked entry of a key, or nil (unlocked) when there is none.
func (js *Jobs) lock(key JobKey) *entry {
	sh := js.shard(key)
	sh.mu.Lock()
	lj, ok := sh.jobs[key]
	if !ok {
		sh.mu.Unlock()
		return nil
	}
	return sh.entry(key, lj)
}

// record returns the job's full record: the attached one, the hot copy (which it hands over:
// the caller may change the record, so the copy would go stale), or one read from the store.
// The shard is locked.
func (js *Jobs) record(e *entry) (*Job, error) {
	if rec := e.attached(); rec != nil {
		return rec, nil
	}
	if e.x != nil && e.x.hot != nil {
		rec := e.x.hot.rec
		js.dropHot(e)
		return rec, nil
	}
	rec, err := js.store.GetJob(e.key.String())
	if err != nil {
		return nil, Internal("reading the job", err)
	}
	return rec, nil
}

// save writes the record without waiting for the disk and refreshes the index entry. The shard
// is locked, so one job's writes land in order; operations that must be durable call sync once
// unlocked.
func (js *Jobs) save(e *entry, rec *Job) {
	e.state, e.expiresAt = stateOf(rec.Status), rec.ExpiresAt.UnixNano()
	if err := js.store.PutJob(rec, nil, false); err != nil {
		js.log.Error("storing job", "job", rec.ID, "err", err)
	}
}

// sync makes the writes so far durable; the shared WAL sync groups concurrent callers.
func (js *Jobs) sync(needed bool) error {
	if !needed {
		return nil
	}
	if err := js.store.SyncJobs(); err != nil {
		js.log.Error("syncing jobs", "err", err)
		return Internal("storing the job", err)
	}
	return nil
}

// view runs fn on a job's record with its shard locked and returns a copy of the record.

func (e *entry) wake() {
	if e.x == nil {
		return
	}
	if e.x.done != nil {
		select {
		case <-e.x.done:
		default:
			close(e.x.done)
		}
	}
	if e.x.stream != nil {
		signal(e.x.stream.sig)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
