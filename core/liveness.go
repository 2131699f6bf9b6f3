package core

import (
	"context"
	"strings"
	"time"
)

// This file is how the job engine tells a worker that is alive from one that is not: a silent
// worker holding work is lost (and, with a scheduler, replaced), and a stopped job the worker
// still reports holding keeps being named by job-stop.

// StopRepeat is how long job-stop waits before it names again a stopped job the worker still
// reports holding. The runpod SDK ignores a stop for a job whose task it has not started yet
// (it starts taken jobs on a ~0.1 s loop) and polls job-stop again at once after a non-empty
// answer, so the repeat comes after a pause, not in a loop.
const StopRepeat = time.Second

// stopPingGrace is how long after a stop a ping must arrive for its job_id list to count: a
// ping sent just before the worker received the job does not name it yet.
const stopPingGrace = time.Second

// liveness is a worker's state beyond its jobs; it is part of workerState, guarded by its
// shard's lock.
type liveness struct {
	// lost: the worker went silent holding work and the scheduler was told to stop it; it is
	// given no more jobs and does not count on /health.
	lost bool
	// stopHeld are jobs stopped (cancelled, timed out, expired) while the worker held them,
	// which it may still be running: job-stop keeps naming them, and they keep the worker busy,
	// until a ping no longer lists them, the worker posts their result, or none of its pings
	// has listed them for WorkerLostAfter. The value is when the worker was last known to
	// hold the job (the stop, then each ping that listed it).
	stopHeld map[string]time.Time
}

// busy is how many jobs the worker is running as far as the engine knows; its shard's lock is
// held. A worker to be recycled (stopPod) counts only the jobs it holds: a stopped job it may
// still run ends with it, and waiting for its next ping to drop that job (the runpod SDK pings
// every 10 s) would leave it running, and polling, meanwhile.
func (w *workerState) busy() int {
	if w.stopPod {
		return len(w.held)
	}
	return len(w.held) + len(w.stopHeld)
}

// silentWorkers returns the workers holding work that have been silent too long at now.
func (js *Jobs) silentWorkers(now time.Time) []string {
	var lost []string
	js.workers.each(func(w *workerState) {
		if len(w.stopHeld) > 0 {
			js.expireStopsLocked(w, now)
		}
		if w.busy() > 0 && !w.lost && now.Sub(w.lastSeen) > WorkerLostAfter {
			lost = append(lost, w.id)
		}
	})
	return lost
}

// workerLost applies the worker-lost rule to a silent worker: with a scheduler (subscribed to
// the worker signals), the worker is marked lost (its polls in flight end with nothing, it is
// given no more jobs and does not count on /health) and the scheduler is told to stop it by
// force, before its jobs go back to the queue. With none, a lost worker only loses its jobs.
func (js *Jobs) workerLost(ctx context.Context, worker string) {
	js.log.Warn("worker lost: no heartbeat", "worker", worker, "after", WorkerLostAfter)
	if js.signals.listened() && js.markLost(worker) {
		js.signals.post(WorkerSignal{Worker: worker, Kind: WorkerLost, At: js.clock.Now()})
	}
	js.loseWorker(ctx, worker)
}

// markLost marks a worker lost and ends its polls in flight; false when it is unknown or was
// already lost.
func (js *Jobs) markLost(worker string) bool {
	sh, w := js.workers.lock(worker)
	defer sh.mu.Unlock()
	if w == nil || w.lost {
		return false
	}
	w.lost = true
	clear(w.stopHeld)
	for _, cancel := range w.takes {
		cancel()
	}
	return true
}

// stopHeldLocked records that the worker may still run a job it was told to stop; its shard's lock is held.
func (js *Jobs) stopHeldLocked(w *workerState, id string) {
	if w.stopHeld == nil {
		w.stopHeld = map[string]time.Time{}
	}
	w.stopHeld[id] = js.clock.Now()
}

// expireStopsLocked forgets the stopped jobs no ping has listed for WorkerLostAfter (a worker
// that does not report its jobs); its shard's lock is held.
func (js *Jobs) expireStopsLocked(w *workerState, now time.Time) {
	for id, seen := range w.stopHeld {
		if now.Sub(seen) > WorkerLostAfter {
			delete(w.stopHeld, id)
		}
	}
	js.settleStopsLocked(w, now)
}

// settleStopsLocked follows a change to the worker's stopped jobs; its shard's lock is held.
func (js *Jobs) settleStopsLocked(w *workerState, now time.Time) {
	if w.busy() == 0 && !w.idleSince.Equal(now) {
		w.idleSince = now
	}
	w.publishActivity()
}

// PingJobs is Ping with the ids of the jobs the worker reports in progress (ping's job_id, a
// comma-separated list; "" when it runs none). A stopped job the list still names stays named
// by job-stop; one it no longer names is forgotten.
func (js *Jobs) PingJobs(ctx context.Context, worker, unhealthy, jobs string) {
	now := js.clock.Now()
	if js.pingJobs(worker, unhealthy, jobs, now) {
		js.heartbeat(ctx, worker, now)
	} else if js.shared != nil { // another replica's worker: it is alive, wherever it runs jobs
		js.noteRemote(ctx, worker, WorkerNote{Unhealthy: unhealthy})
		js.heartbeat(ctx, worker, now)
	}
}

// pingJobs is PingJobs but for the store's heartbeat; false when the worker is unknown.
func (js *Jobs) pingJobs(worker, unhealthy, jobs string, now time.Time) bool {
	sh, w := js.workers.lock(worker)
	defer sh.mu.Unlock()
	if w == nil {
		return false
	}
	w.lastSeen = now
	if unhealthy != "" {
		w.unhealthy = unhealthy
	}
	if len(w.stopHeld) == 0 {
		return true
	}
	for id, seen := range w.stopHeld {
		switch {
		case listed(jobs, id):
			w.stopHeld[id] = now
		case now.Sub(seen) >= stopPingGrace:
			delete(w.stopHeld, id)
		}
	}
	js.settleStopsLocked(w, now)
	return true
}

// listed reports whether the comma-separated list names id.
func listed(list, id string) bool {
	for list != "" {
		var item string
		item, list, _ = strings.Cut(list, ",")
		if strings.TrimSpace(item) == id {
			return true
		}
	}
	return false
}

// stopDone forgets a stopped job once the worker posted its result for it (refused: the job
// had ended): the worker does not run it any more.
func (js *Jobs) stopDone(worker, id string) {
	sh, w := js.workers.lock(worker)
	defer sh.mu.Unlock()
	if w != nil {
		if _, held := w.stopHeld[id]; held {
			delete(w.stopHeld, id)
			js.settleStopsLocked(w, js.clock.Now())
		}
	}
}

// stopsToRepeat returns the stopped jobs the worker still reports holding.
func (js *Jobs) stopsToRepeat(w *workerState) []string {
	w.sh.mu.Lock()
	defer w.sh.mu.Unlock()
	if len(w.stopHeld) == 0 {
		return nil
	}
	ids := make([]string, 0, len(w.stopHeld))
	for id := range w.stopHeld {
		ids = append(ids, id)
	}
	return ids
}
