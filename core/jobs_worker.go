package core

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

type workerState struct {
	id, endpoint string
	sh           *workerShard // whose lock guards the fields below
	lastSeen     time.Time
	polled       bool      // has polled for a job since it started or resumed
	idleSince    time.Time // when it last held no job (its first poll, or its last job's end)
	held         map[string]bool
	stop         chan string // job ids the worker must stop
	stopPod      bool
	unhealthy    string // why the worker reported itself unhealthy; "" = healthy
	liveness            // lost, and stopped jobs it still runs (liveness.go)
	// Suspension (FLASHBOOT): a suspended worker's polls park until it resumes.
	suspended bool
	resumed   chan struct{}                 // closed on resume; made on suspend
	takes     map[uint64]context.CancelFunc // Take calls past their suspension check: each one's end
	nextTake  uint64
	// The activity above, mirrored for lock-free readers (WorkerActivity); written under the
	// shard's lock.
	aPolled, aStopPod atomic.Bool
	aBusy             atomic.Int32
	aIdle             atomic.Int64 // Unix nanoseconds; 0 = never idle yet
	// Shared store (jobs_shared.go): another replica noted hearing from the worker, and the
	// count of its polls there as last merged.
	noted       bool
	remotePolls int64
}

// publishActivity mirrors the worker's activity into its atomics; its shard's lock is held.
func (w *workerState) publishActivity() {
	w.aPolled.Store(w.polled)
	w.aBusy.Store(int32(w.busy()))
	w.aStopPod.Store(w.stopPod)
	if !w.idleSince.IsZero() {
		w.aIdle.Store(w.idleSince.UnixNano())
	}
}

// RegisterWorker records a worker about to start and returns its token.
func (js *Jobs) RegisterWorker(endpoint, worker string) string {
	token, _ := js.RegisterWorkerActivity(endpoint, worker)
	return token
}

// RegisterWorkerActivity is RegisterWorker that also returns the worker's activity (what
// Activity would), under one lock. The token is signed (workertoken.go): any replica checks it.
func (js *Jobs) RegisterWorkerActivity(endpoint, worker string) (string, WorkerActivity) {
	token := js.tokens.Issue(endpoint, worker)
	sh := js.workers.shard(worker)
	w := &workerState{id: worker, endpoint: endpoint, sh: sh, held: map[string]bool{}, stop: make(chan string, 64)}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	w.lastSeen = js.clock.Now()
	sh.workers[worker] = w
	return token, WorkerActivity{w}
}

// ForgetWorker removes a worker that stopped and revokes its token; its jobs follow the
// worker-lost rule.
func (js *Jobs) ForgetWorker(ctx context.Context, worker string) {
	if err := js.tokens.Revoke(ctx, worker); err != nil {
		js.log.Error("forgetting a worker", "worker", worker, "err", err)
	}
	js.loseWorker(ctx, worker)
	sh, w := js.workers.lock(worker)
	defer sh.mu.Unlock()
	if w != nil {
		delete(sh.workers, worker)
		if w.suspended {
			js.resumeLocked(w) // its parked polls end
		}
	}
	if err := js.store.ForgetWorker(ctx, worker); err != nil {
		js.log.Error("forgetting a worker", "worker", worker, "err", err)
	}
}

// AuthWorker checks a worker token for a route's endpoint and worker id. The check needs
// nothing this process holds: a worker registered by another replica passes it too. A worker
// this process knows is seen alive, and asked to recycle once its token nears its expiry.
func (js *Jobs) AuthWorker(ctx context.Context, token, endpoint, worker string) error {
	now := js.clock.Now()
	exp, err := js.tokens.check(ctx, token, endpoint, worker, now)
	if err != nil {
		return err
	}
	sh, w := js.workers.lock(worker)
	ok := w != nil
	if ok {
		w.lastSeen = now
		if !w.stopPod && exp.Sub(now) < WorkerTokenRecycle {
			js.stopPodLocked(w)
		}
	}
	sh.mu.Unlock()
	if !ok && js.shared != nil && exp.Sub(now) < WorkerTokenRecycle {
		js.noteRemote(ctx, worker, WorkerNote{StopPod: true}) // another replica's worker: its registrar recycles it
	}
	return nil
}

// stopPodLocked marks the worker to be recycled (stopPod): it takes no further job, the polls
// it has in flight end with nothing, and the stopped jobs it may still run no longer keep it
// busy (see busy), so the scheduler retires it once the jobs it holds end. Its shard's lock is
// held.
func (js *Jobs) stopPodLocked(w *workerState) {
	if w.stopPod {
		return
	}
	busy := w.busy()
	w.stopPod = true
	for _, cancel := range w.takes {
		cancel()
	}
	if busy > 0 && w.busy() == 0 {
		w.idleSince = js.clock.Now()
	}
	w.publishActivity()
}

// WorkerStopPod reports whether the worker asked to be recycled (stopPod) and holds no job.
func (js *Jobs) WorkerStopPod(worker string) bool {
	sh, w := js.workers.lock(worker)
	defer sh.mu.Unlock()
	return w != nil && w.stopPod && w.busy() == 0
}

// Taken is a job handed to a worker.
type Taken struct {
	ID       string
	Input    json.RawMessage
	S3Config json.RawMessage
}

// Take waits for up to max jobs of the endpoint for the worker, moving each IN_PROGRESS.
// It returns nothing when ctx ends first. A suspended worker's Take waits for its resume.
func (js *Jobs) Take(ctx context.Context, endpoint, worker string, max int) []Taken {
	sh, w := js.workers.lock(worker)
	ok := w != nil
	for ok && (w.suspended || w.lost || w.stopPod) {
		// Lost, it is being stopped; asked to be recycled (stopPod), it is about to be:
		// either way its poll ends with nothing, and it is given no further job.
		if w.lost || w.stopPod {
			sh.mu.Unlock()
			<-ctx.Done()
			return nil
		}
		resumed := w.resumed
		sh.mu.Unlock()
		select {
		case <-resumed:
		case <-ctx.Done():
			return nil
		}
		sh.mu.Lock()
	}
	if js.draining.Load() { // read under the shard's lock: see Drain
		sh.mu.Unlock()
		return js.drainedTake(ctx)
	}
	first := false
	var now time.Time
	if ok {
		now = js.clock.Now()
		first = !w.polled
		if first {
			w.polled = true
			w.idleSince = now
			w.publishActivity()
		}
		w.lastSeen = now
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		if w.takes == nil {
			w.takes = map[uint64]context.CancelFunc{}
		}
		w.nextTake++
		n := w.nextTake
		w.takes[n] = cancel
		defer func() {
			cancel()
			sh.mu.Lock()
			delete(w.takes, n)
			sh.mu.Unlock()
			sh.takes.Broadcast()
		}()
	}
	sh.mu.Unlock()
	if first {
		js.signals.post(WorkerSignal{Worker: worker, Kind: WorkerReady, At: now})
	}
	if !ok && js.shared != nil { // another replica's worker: its registrar learns it polls
		if js.shared.notedStopPod(worker) { // its last job, posted here, asked for stopPod
			<-ctx.Done()
			return nil
		}
		js.noteRemote(ctx, worker, WorkerNote{Polled: true})
	}
	for ctx.Err() == nil {
		got, err := js.store.Take(ctx, endpoint, worker, max, js.clock.Now())
		if err != nil {
			js.log.Error("taking jobs", "endpoint", endpoint, "worker", worker, "err", err)
		}
		if len(got) > 0 {
			return js.taken(worker, got)
		}
		if err != nil {
			select { // a store fault: try again shortly rather than spin
			case <-ctx.Done():
			case <-time.After(takeRetry):
			}
			continue
		}
		_ = js.store.WaitAvailable(ctx, endpoint)
	}
	return nil
}

// takeRetry is how long a Take waits before trying a store that failed again.
const takeRetry = 100 * time.Millisecond

// taken records the jobs the store moved to the worker and hands them out.
func (js *Jobs) taken(worker string, got []TakenJob) []Taken {
	out := make([]Taken, len(got))
	sh, w := js.workers.lock(worker)
	ok := w != nil
	for i := range got {
		j := &got[i].Job
		out[i] = Taken{ID: j.ID, Input: got[i].Input, S3Config: j.S3Config}
		if ok {
			w.held[j.ID] = true
			if len(w.stopHeld) > 0 {
				delete(w.stopHeld, j.ID) // taken again (a retry): it is not stopped any more
			}
		}
	}
	if ok {
		w.publishActivity()
	}
	sh.mu.Unlock()
	if js.observe != nil {
		for i := range got {
			js.observe.JobTaken(&got[i].Job)
		}
	}
	return out
}

// post applies a worker's post to a job it holds (IN_PROGRESS, taken by it): fn changes the
// record. It returns the job as stored.
func (js *Jobs) post(ctx context.Context, endpoint, worker, id string, durable bool, fn func(j *Job, now time.Time)) (Job, error) {
	ref := JobRef{Endpoint: endpoint, ID: id}
	now := js.clock.Now()
	j, err := js.store.Update(ctx, id, Statuses(InProgress), func(j *Job) error {
		if err := check(ref, j, now); err != nil {
			return err
		}
		if j.WorkerID != worker {
			return errNotHeld
		}
		fn(j, now)
		return nil
	}, durable)
	if err != nil {
		return Job{}, js.notHeld(ctx, ref, worker, err)
	}
	return j, nil
}

// errNotHeld is a change refused because another worker holds the job.
var errNotHeld = errors.New("the job is held by another worker")

// notHeld turns a store's refusal of a worker's post into the worker's error.
func (js *Jobs) notHeld(ctx context.Context, ref JobRef, worker string, err error) error {
	var se *StateError
	if errors.As(err, &se) || errors.Is(err, errNotHeld) {
		j, rerr := js.read(ctx, ref)
		if rerr != nil {
			return rerr
		}
		if j.Status.Terminal() {
			return Errorf(KindConflict, "job %s is already %s; this post changes nothing", ref.ID, j.Status)
		}
		return Errorf(KindConflict, "job %s is not held by worker %s", ref.ID, worker)
	}
	return js.refused(ctx, ref, "", err)
}

// Result is what a worker posts to job-done.
type Result struct {
	Output   json.RawMessage // nil = none
	Error    string          // non-empty: the job failed
	Progress bool            // status IN_PROGRESS: a progress update
	StopPod  bool            // recycle the worker after this job
	TooLarge int64           // > 0: the result was refused for its size (bytes)
}

// Done applies a worker's job-done post. The worker hears success only once the result is on
// disk.
//
// A result that completes a job of a metered endpoint (a ready-made model's) is measured first
// (reading the files it names happens before the job is locked); then, under the job's lock and
// only if the job is still the worker's to complete, the charge is recorded in the usage ledger,
// durably, before the job turns COMPLETED with its cost. A job completes once, and the ledger
// keeps one record per job, so a job is charged exactly once whatever posts race or repeat.
// An output that cannot be measured fails the job, and a failed job is charged nothing.
func (js *Jobs) Done(ctx context.Context, endpoint, worker, id string, r Result) error {
	// A worker's result is stored, and charged, even if its request is cut meanwhile: the
	// worker ran the job and may not post again, and a charge once measured must be recorded
	// with it. WithoutCancel keeps ctx's values (its trace) and allocates a small struct per
	// post, far less than the post's store write.
	ctx = context.WithoutCancel(ctx)
	var charge Charge
	var unmeasured error
	metered := js.meter != nil && !r.Progress && r.Error == "" && r.TooLarge == 0 && len(r.Output) <= MaxResult &&
		js.meter.Metered(endpoint)
	if metered {
		charge, unmeasured = js.measure(ctx, endpoint, id, r.Output)
	}
	ev := EvDone
	j, err := js.post(ctx, endpoint, worker, id, !r.Progress && !isSync(id), func(rec *Job, now time.Time) {
		switch {
		case r.TooLarge > 0 || len(r.Output) > MaxResult:
			size := max(r.TooLarge, int64(len(r.Output)))
			rec.Output = nil
			rec.Error = fmt.Sprintf("the worker's result is %d bytes, over the %d MB limit; store large outputs elsewhere (e.g. s3Config) and return a reference", size, MaxResult>>20)
			ev = EvFail
		case r.Progress:
			rec.Output = r.Output
			ev = EvProgress
			return
		case r.Error != "":
			rec.Error = r.Error
			if r.Output != nil {
				rec.Output = r.Output
			}
			ev = EvFail
		case unmeasured != nil:
			rec.Output = r.Output
			rec.Error = "the model's output could not be measured for billing, so the job failed and nothing is charged: " + unmeasured.Error()
			ev = EvFail
		case metered:
			// ctx is detached from the worker's request (see above): a charge once measured
			// is recorded whatever becomes of it.
			u, _, err := js.usage.AddUsage(ctx, Usage{Charge: charge, JobID: rec.ID, Owner: rec.Owner, At: now})
			if err != nil {
				js.log.Error("recording a charge", "job", rec.ID, "err", err)
				rec.Error = "recording the job's charge failed, so the job failed and nothing is charged; retry it"
				ev = EvFail
				break
			}
			rec.Output, rec.Cost = r.Output, &u.Charge // the ledger's record: an earlier one if there was
		default:
			rec.Output = r.Output
		}
		to, _ := Next(InProgress, ev)
		js.ending(rec, to, now)
	})
	if err != nil {
		if !r.Progress {
			js.stopDone(worker, id) // a stopped job the worker ran to its end
		}
		return err
	}
	if r.StopPod || js.shared != nil {
		sh, w := js.workers.lock(worker)
		ok := w != nil
		if ok && r.StopPod {
			js.stopPodLocked(w)
		}
		sh.mu.Unlock()
		if !ok && js.shared != nil { // another replica's worker: its registrar learns the job ended
			js.noteRemote(ctx, worker, WorkerNote{StopPod: r.StopPod})
		}
	}
	if ev != EvProgress {
		js.ended(ctx, &j, InProgress, ev)
	}
	return nil
}

// measure prices a completing job's output with the meter.
func (js *Jobs) measure(ctx context.Context, endpoint, id string, output json.RawMessage) (Charge, error) {
	input, err := js.store.Input(ctx, id)
	if err != nil {
		return Charge{}, fmt.Errorf("reading the job's input: %w", err)
	}
	c, err := js.meter.Measure(ctx, MeterJob{ID: id, Endpoint: endpoint, Input: input, Output: output})
	if err != nil {
		return Charge{}, err
	}
	if c.CostMicros < 0 || c.UnitsMicros < 0 || c.Quantity < 0 {
		return Charge{}, fmt.Errorf("the meter returned a negative charge %+v", c)
	}
	return c, nil
}

// JobsToStop waits up to wait for jobs the worker must stop (cancelled or timed out).
func (js *Jobs) JobsToStop(ctx context.Context, worker string, wait time.Duration) []string {
	sh, w := js.workers.lock(worker)
	ok := w != nil
	repeat := ok && len(w.stopHeld) > 0
	sh.mu.Unlock()
	if !ok {
		if js.shared != nil { // another replica's worker: hold its poll rather than answer at once
			t := time.NewTimer(wait)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		}
		return nil
	}
	// Stopped jobs the worker still runs are named again after StopRepeat (liveness.go).
	var timeout, again <-chan time.Time
	if repeat {
		wait = min(wait, StopRepeat)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	if timeout = t.C; repeat {
		timeout, again = nil, t.C
	}
	select {
	case <-again:
		return js.stopsToRepeat(w)
	case id := <-w.stop:
		ids := []string{id}
		for {
			select {
			case id := <-w.stop:
				ids = append(ids, id)
			default:
				return ids
			}
		}
	case <-timeout:
	case <-ctx.Done():
	}
	return nil
}

// Ping records a worker's heartbeat. A non-empty unhealthy reason marks the worker unhealthy
// (a RunPod worker that fails its startup checks pings status=unhealthy, then exits).
func (js *Jobs) Ping(ctx context.Context, worker, unhealthy string) {
	now := js.clock.Now()
	sh, w := js.workers.lock(worker)
	ok := w != nil
	if ok {
		w.lastSeen = now
		if unhealthy != "" {
			w.unhealthy = unhealthy
		}
	}
	sh.mu.Unlock()
	if ok {
		js.heartbeat(ctx, worker, now)
	} else if js.shared != nil { // another replica's worker: it is alive, wherever it runs jobs
		js.noteRemote(ctx, worker, WorkerNote{Unhealthy: unhealthy})
		js.heartbeat(ctx, worker, now)
	}
}

// heartbeat tells the store the worker is alive, for replicas that do not hear its pings.
func (js *Jobs) heartbeat(ctx context.Context, worker string, now time.Time) {
	if err := js.store.Heartbeat(ctx, worker, now); err != nil {
		js.log.Error("recording a heartbeat", "worker", worker, "err", err)
	}
}

// release drops a job from its worker; stop tells the worker to stop running it.
func (js *Jobs) release(worker, id string, stop bool) {
	sh, w := js.workers.lock(worker)
	defer sh.mu.Unlock()
	if w == nil {
		return
	}
	delete(w.held, id)
	if stop {
		js.stopHeldLocked(w, id)
	}
	if w.busy() == 0 {
		w.idleSince = js.clock.Now()
	}
	w.publishActivity()
	if stop {
		select {
		case w.stop <- id:
		default: // the worker is not reading job-stop; the job is refused when it posts anyway
		}
	}
}

// loseWorker applies the worker-lost rule to the worker's jobs: back to the queue with one
// more retry, or FAILED once the retry budget is spent.
func (js *Jobs) loseWorker(ctx context.Context, worker string) {
	sh, w := js.workers.lock(worker)
	ok := w != nil
	var ids []string
	if ok {
		for id := range w.held {
			ids = append(ids, id)
		}
		clear(w.held)
		clear(w.stopHeld)
		w.idleSince = js.clock.Now()
		w.publishActivity()
	}
	sh.mu.Unlock()
	if !ok { // another replica's worker, or one this replica forgot: ask the store
		held, err := js.store.Held(ctx, worker)
		if err != nil {
			js.log.Error("reading a lost worker's jobs", "worker", worker, "err", err)
		}
		ids = held
	} else { // on a shared store it may hold jobs taken through another replica
		for _, id := range js.heldInStore(ctx, worker) {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	for _, id := range ids {
		js.lostJob(ctx, worker, id)
	}
}

// lostJob applies the worker-lost rule to one job while worker ("" = any) holds it: back to
// the queue with one more retry, or FAILED once the retry budget is spent. Synced.
func (js *Jobs) lostJob(ctx context.Context, worker, id string) (requeued bool) {
	var ev Event
	j, err := js.store.Update(ctx, id, Statuses(InProgress), func(j *Job) error {
		if worker != "" && j.WorkerID != worker {
			return errNotHeld
		}
		now := js.clock.Now()
		if j.Retries >= RetryBudget {
			j.Error = fmt.Sprintf("the worker running the job was lost %d times; giving up", j.Retries+1)
			ev = EvLost
			js.ending(j, Failed, now)
			return nil
		}
		ev = EvRequeue
		requeueing(j, now, true)
		return nil
	}, true)
	var se *StateError
	switch {
	case errors.As(err, &se), errors.Is(err, errNotHeld), errors.Is(err, ErrNotFound):
		return false // ended or went elsewhere meanwhile
	case err != nil:
		js.log.Error("taking a lost worker's job back", "job", id, "err", err)
		return false
	case ev == EvLost:
		js.ended(ctx, &j, InProgress, ev)
		return false
	}
	js.countsOf(j.Endpoint).Submitted.Add(1)
	return true
}

// Holds returns nil when the worker holds the job (IN_PROGRESS, taken by it), else the error a
// post for the job would get: a worker may store files only for a job it runs.
func (js *Jobs) Holds(ctx context.Context, endpoint, worker, id string) error {
	_, err := js.HeldOwner(ctx, endpoint, worker, id)
	return err
}

// HeldOwner is Holds, and returns the user whose job it is (the endpoint's id for a job
// without one): the files the job stores count against that user's quota.
func (js *Jobs) HeldOwner(ctx context.Context, endpoint, worker, id string) (string, error) {
	ref := JobRef{Endpoint: endpoint, ID: id}
	j, err := js.read(ctx, ref)
	if err != nil {
		return "", err
	}
	if j.Status != InProgress || j.WorkerID != worker {
		return "", js.notHeld(ctx, ref, worker, errNotHeld)
	}
	return cmp.Or(j.Owner, "endpoint "+endpoint), nil
}
