package core

import (
	"context"
	"slices"
	"sync"
	"time"
)

// This file is the engine's side of SharedWorkers: with several replicas on one store, a
// worker registered by one replica (the leader's scheduler started it) may poll, post and ping
// through another. The other replica notes what it heard in the store, coalesced (a first
// contact, a poll at most every notePollEvery, a stopPod, an unhealthy reason; never one
// write per job); the registering replica merges the notes, the jobs the worker holds and its
// heartbeat into its own workerState every SharedRefresh, in one query. The leader publishes
// its workers' figures for /health as often, when they change; the other replicas read them.
//
// On a store without SharedWorkers (the embedded one) none of this runs: js.shared is nil.

// SharedRefresh is how often the registering replica merges what other replicas noted, how
// often the leader publishes its worker figures, and how old the figures another replica's
// /health shows may be.
const SharedRefresh = time.Second

// notePollEvery is how often a replica notes the polls of a worker it did not register: the
// first poll at once, later ones (a worker resumed after a suspension) at most this often.
const notePollEvery = 5 * time.Second

// noteForget is how long a replica remembers what it noted of a worker it no longer hears.
const noteForget = 10 * time.Minute

// shared is the engine's SharedWorkers state.
type shared struct {
	store SharedWorkers

	hookMu  sync.Mutex
	leading func() (epoch int64, ok bool) // nil = never publish or read the leader's figures

	mu        sync.Mutex
	notes     map[string]*noted // workers this replica did not register but heard, by id
	lastPrune time.Time

	// The ticking goroutine's own (Tick is not called concurrently with itself).
	lastRefresh, lastPublish, lastWebhookSweep time.Time
	offered                                    map[string]time.Time // orphaned webhooks offered again, by job id
	pubEpoch                                   int64
	published                                  map[string]WorkerFigures // as last written in pubEpoch

	figMu      sync.Mutex
	figReading bool // a caller is reading the figures
	figAt      time.Time
	figs       map[string]WorkerFigures
}

// noted is what this replica last wrote of a worker another replica registered.
type noted struct {
	heard     time.Time // its last contact here
	polledAt  time.Time // the last poll noted; zero = none
	stopPod   bool
	unhealthy string
}

// newShared returns the state for store, or nil when it shares no workers.
func newShared(store JobStore) *shared {
	sw, ok := store.(SharedWorkers)
	if !ok {
		return nil
	}
	return &shared{store: sw, notes: map[string]*noted{}, offered: map[string]time.Time{}}
}

// ShareFigures tells the engine, on a shared store, whether this replica leads and in which
// epoch: the leader publishes its worker figures for /health, the others show the leader's.
// Without it every replica shows its own. It does nothing on a store that shares no workers.
func (js *Jobs) ShareFigures(leading func() (epoch int64, ok bool)) {
	if sh := js.shared; sh != nil {
		sh.hookMu.Lock()
		sh.leading = leading
		sh.hookMu.Unlock()
	}
}

// leads reports the epoch this replica leads in; ok is false when it follows or no one told.
func (sh *shared) leads() (epoch int64, ok, told bool) {
	sh.hookMu.Lock()
	f := sh.leading
	sh.hookMu.Unlock()
	if f == nil {
		return 0, false, false
	}
	epoch, ok = f()
	return epoch, ok, true
}

// notedStopPod reports whether this replica noted a stopPod for a worker it did not register:
// the worker is to be recycled, and is given no further job here.
func (sh *shared) notedStopPod(worker string) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st, ok := sh.notes[worker]
	return ok && st.stopPod
}

// noteRemote records in the store what this replica heard from a worker it did not register,
// when that is news: its first contact, a poll not noted for notePollEvery, a stopPod, a new
// unhealthy reason. Nothing is written otherwise. js.shared is not nil.
func (js *Jobs) noteRemote(ctx context.Context, worker string, n WorkerNote) {
	sh := js.shared
	now := js.clock.Now()
	sh.mu.Lock()
	st, known := sh.notes[worker]
	if !known {
		st = &noted{}
		sh.notes[worker] = st
	}
	st.heard = now
	n.Polled = n.Polled && (st.polledAt.IsZero() || now.Sub(st.polledAt) >= notePollEvery || now.Before(st.polledAt))
	n.StopPod = n.StopPod && !st.stopPod
	if n.Unhealthy == st.unhealthy {
		n.Unhealthy = ""
	}
	if known && !n.Polled && !n.StopPod && n.Unhealthy == "" {
		sh.mu.Unlock()
		return
	}
	if n.Polled {
		st.polledAt = now
	}
	st.stopPod = st.stopPod || n.StopPod
	if n.Unhealthy != "" {
		st.unhealthy = n.Unhealthy
	}
	sh.mu.Unlock()
	if err := sh.store.NoteWorker(ctx, worker, n, now); err != nil {
		js.log.Error("noting another replica's worker", "worker", worker, "err", err)
		sh.mu.Lock()
		delete(sh.notes, worker) // its next contact writes again
		sh.mu.Unlock()
	}
}

// tickShared runs the shared parts of Tick: the merge and the publishing, each every
// SharedRefresh, and the forgetting of old notes.
func (js *Jobs) tickShared(ctx context.Context, now time.Time) {
	sh := js.shared
	if now.Sub(sh.lastRefresh) >= SharedRefresh || now.Before(sh.lastRefresh) {
		sh.lastRefresh = now
		js.mergeShared(ctx, now)
	}
	if now.Sub(sh.lastPublish) >= SharedRefresh || now.Before(sh.lastPublish) {
		sh.lastPublish = now
		js.publishFigures(ctx)
	}
	if js.notify != nil && (now.Sub(sh.lastWebhookSweep) >= webhookSweepEvery || now.Before(sh.lastWebhookSweep)) {
		if _, leading, _ := sh.leads(); leading {
			sh.lastWebhookSweep = now
			js.redeliverOrphanedWebhooks(ctx, now)
		}
	}
	sh.mu.Lock()
	if now.Sub(sh.lastPrune) >= time.Minute {
		sh.lastPrune = now
		for id, st := range sh.notes {
			if now.Sub(st.heard) > noteForget {
				delete(sh.notes, id)
			}
		}
	}
	sh.mu.Unlock()
}

// mergeShared merges into this replica's workers what other replicas noted of them: a poll
// elsewhere ends a cold start (WorkerReady), the jobs a worker holds anywhere keep it busy
// (so that SuspendWorker and the scheduler's retire refuse it), jobs it took here and ended
// elsewhere are dropped, and its heartbeat elsewhere keeps it alive. One query for all.
func (js *Jobs) mergeShared(ctx context.Context, now time.Time) {
	var ids []string
	before := map[string][]string{} // the jobs held here by workers noted before, as the query starts
	js.workers.each(func(w *workerState) {
		ids = append(ids, w.id)
		if w.noted && len(w.held) > 0 {
			held := make([]string, 0, len(w.held))
			for j := range w.held {
				held = append(held, j)
			}
			before[w.id] = held
		}
	})
	if len(ids) == 0 {
		return
	}
	acts, err := js.shared.store.SharedActivity(ctx, ids)
	if err != nil {
		js.log.Error("reading what other replicas heard from workers", "err", err)
		return
	}
	var ready []WorkerSignal
	for i := range acts {
		if s, ok := js.mergeActivity(&acts[i], before[acts[i].Worker], now); ok {
			ready = append(ready, s)
		}
	}
	for _, s := range ready {
		js.signals.post(s)
	}
}

// mergeActivity merges what other replicas noted of one worker (see mergeShared); it returns
// the worker's ready signal when a poll elsewhere ended its cold start.
func (js *Jobs) mergeActivity(a *SharedActivity, before []string, now time.Time) (ready WorkerSignal, isReady bool) {
	sh, w := js.workers.lock(a.Worker)
	defer sh.mu.Unlock()
	if w == nil {
		return WorkerSignal{}, false
	}
	w.noted = true
	busy := w.busy()
	for _, id := range a.Held {
		w.held[id] = true
	}
	for _, id := range before {
		if !slices.Contains(a.Held, id) {
			delete(w.held, id) // ended, or taken back, through another replica
		}
	}
	if a.Polls > w.remotePolls {
		w.remotePolls = a.Polls
		if !w.polled && !w.suspended && !w.lost {
			at := a.PolledAt
			if at.IsZero() || at.After(now) {
				at = now
			}
			w.polled, w.idleSince = true, at
			ready, isReady = WorkerSignal{Worker: a.Worker, Kind: WorkerReady, At: at}, true
		}
	}
	if a.StopPod {
		js.stopPodLocked(w)
	}
	if a.Unhealthy != "" {
		w.unhealthy = a.Unhealthy
	}
	if a.Seen.After(w.lastSeen) {
		w.lastSeen = a.Seen
	}
	if busy > 0 && w.busy() == 0 {
		w.idleSince = now
	}
	w.publishActivity()
	return ready, isReady
}

// heldInStore returns the jobs the store says worker holds, through whichever replica; nil on
// a store that shares no workers (there this replica hands out every job). No worker's lock is
// held.
func (js *Jobs) heldInStore(ctx context.Context, worker string) []string {
	if js.shared == nil {
		return nil
	}
	held, err := js.store.Held(ctx, worker)
	if err != nil {
		js.log.Error("reading a worker's jobs", "worker", worker, "err", err)
	}
	return held
}

// publishFigures writes the endpoints' worker figures that changed since the last write, when
// this replica leads; all of them when its epoch is new.
func (js *Jobs) publishFigures(ctx context.Context) {
	sh := js.shared
	epoch, ok, _ := sh.leads()
	if !ok {
		return
	}
	figs := js.allLocalFigures()
	changed := map[string]WorkerFigures{}
	if epoch != sh.pubEpoch {
		sh.published = map[string]WorkerFigures{}
	}
	for ep, f := range figs {
		if old, ok := sh.published[ep]; !ok || !f.equal(old) {
			changed[ep] = f
		}
	}
	for ep := range sh.published {
		if _, ok := figs[ep]; !ok && !sh.published[ep].equal(WorkerFigures{}) {
			changed[ep] = WorkerFigures{} // no workers and no condition any more
		}
	}
	if len(changed) == 0 && epoch == sh.pubEpoch {
		return
	}
	if err := sh.store.PublishFigures(ctx, epoch, changed); err != nil {
		js.log.Error("publishing worker figures", "err", err)
		return
	}
	sh.pubEpoch = epoch
	for ep, f := range changed {
		sh.published[ep] = f
	}
}

// sharedFigures returns the leader's figures for the endpoint when this replica follows
// (ok false when it leads, or on a store that shares no workers: it shows its own). They are
// read at most every SharedRefresh, by one caller while the others show the last ones read;
// when a read fails the last ones are shown.
func (js *Jobs) sharedFigures(ctx context.Context, endpoint string) (WorkerFigures, bool) {
	sh := js.shared
	if sh == nil {
		return WorkerFigures{}, false
	}
	if _, leads, told := sh.leads(); leads || !told {
		return WorkerFigures{}, false
	}
	now := js.clock.Now()
	sh.figMu.Lock()
	if sh.figReading || (sh.figs != nil && now.Sub(sh.figAt) < SharedRefresh && !now.Before(sh.figAt)) {
		f := sh.figs[endpoint]
		sh.figMu.Unlock()
		return f, true
	}
	sh.figReading = true
	sh.figMu.Unlock()
	figs, err := sh.store.ReadFigures(ctx)
	if err != nil {
		js.log.Error("reading the leader's worker figures", "err", err)
	}
	sh.figMu.Lock()
	defer sh.figMu.Unlock()
	sh.figReading, sh.figAt = false, now
	if err == nil {
		sh.figs = figs
	}
	return sh.figs[endpoint], true
}

// equal reports whether two figures are the same.
func (f WorkerFigures) equal(g WorkerFigures) bool {
	return f.Idle == g.Idle && f.Running == g.Running && f.Initializing == g.Initializing && f.Unhealthy == g.Unhealthy &&
		f.Throttled == g.Throttled && f.Suspended == g.Suspended && f.Reason == g.Reason && f.ColdStarts == g.ColdStarts &&
		f.ColdStartLast == g.ColdStartLast && f.ColdStartTotal == g.ColdStartTotal &&
		slices.Equal(f.UnhealthyReasons, g.UnhealthyReasons)
}
