package core

import (
	"context"
	"time"
)

// A graceful stop drains the job engine in three steps: Drain stops handing out jobs,
// WaitRunning gives the jobs in progress time to finish (their results are taken as usual),
// and Release puts the ones still running back in the queue without spending a retry, so that
// the next start runs them again as if the stop had not happened.

// Drain stops handing out jobs: the Take calls waiting now end with nothing, and later ones
// wait, taking nothing, until their context ends (a worker's poll is answered "no job" when
// the server stops serving). Running jobs go on, and their results, progress and streams are
// taken as usual. There is no way back: Drain is for a server that is stopping.
func (js *Jobs) Drain() {
	// Set before the shards are locked: a Take reads it under its shard's lock, so it either
	// sees it or has registered its call, which the loop below ends.
	js.draining.Store(true)
	js.workers.each(func(w *workerState) {
		for _, cancel := range w.takes {
			cancel()
		}
	})
}

// drainedTake is a Take while draining: no job, once ctx ends.
func (js *Jobs) drainedTake(ctx context.Context) []Taken {
	<-ctx.Done()
	return nil
}

// Running returns how many jobs the workers hold (IN_PROGRESS).
func (js *Jobs) Running() int {
	n := 0
	js.workers.each(func(w *workerState) { n += len(w.held) })
	return n
}

// WaitRunning waits until no worker holds a job, or ctx ends; it reports whether none does.
// It looks every poll (a graceful stop waits seconds, so a few milliseconds do not matter).
func (js *Jobs) WaitRunning(ctx context.Context, poll time.Duration) bool {
	t := time.NewTicker(poll)
	defer t.Stop()
	for js.Running() > 0 {
		select {
		case <-ctx.Done():
			return js.Running() == 0
		case <-t.C:
		}
	}
	return true
}

// Release puts every running job back IN_QUEUE, synced, for a graceful stop: its retries are
// unchanged (the worker was not lost; the server stopped it), and the worker is told in job-stop
// to stop it; a result it posts later is refused (409), as for any job it no longer holds.
// Release drains first (see Drain) and waits for the Take calls moving a job to a worker. The
// store queues the jobs again, but no worker of this engine takes them now; the next start
// loads them in their original order. It returns how many jobs it put back.
func (js *Jobs) Release(ctx context.Context) (int, error) {
	type held struct{ worker, id string }
	var all []held
	js.Drain()
	for i := range js.workers.shards {
		sh := &js.workers.shards[i]
		sh.mu.Lock()
		for sh.taking() { // a Take may be moving a job to a worker right now
			sh.takes.Wait()
		}
		for _, w := range sh.workers {
			for id := range w.held {
				all = append(all, held{w.id, id})
			}
		}
		sh.mu.Unlock()
	}
	n := 0
	for _, h := range all {
		_, err := js.store.Update(ctx, h.id, Statuses(InProgress), func(j *Job) error {
			if j.WorkerID != h.worker {
				return errNotHeld
			}
			requeueing(j, js.clock.Now(), false)
			return nil
		}, true)
		if err != nil {
			continue // ended meanwhile
		}
		js.release(h.worker, h.id, true)
		n++
	}
	return n, nil
}

// taking reports whether a Take call of one of the shard's workers is under way; sh.mu is held.
func (sh *workerShard) taking() bool {
	for _, w := range sh.workers {
		if len(w.takes) > 0 {
			return true
		}
	}
	return false
}

// RegisteredWorkers returns how many workers the engine knows (registered and not yet forgotten).
func (js *Jobs) RegisteredWorkers() int {
	return js.workers.len()
}
