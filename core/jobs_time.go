package core

import (
	"context"
	"fmt"
	"time"
)

// Tick applies everything due at now: expired jobs are removed, running jobs past their
// execution timeout become TIMED_OUT, and silent workers lose their jobs. Run it about every
// quarter second; tests call it with an injected clock.
func (js *Jobs) Tick(ctx context.Context, now time.Time) {
	expired, err := js.store.Expire(ctx, now)
	if err != nil {
		js.log.Error("expiring jobs", "err", err)
	}
	for _, x := range expired {
		if x.Status == InProgress && x.WorkerID != "" {
			js.release(x.WorkerID, x.ID, true)
		}
	}
	overdue, err := js.store.Overdue(ctx, now)
	if err != nil {
		js.log.Error("finding jobs past their timeout", "err", err)
	}
	for _, id := range overdue {
		js.timeOut(ctx, id, now)
	}
	// Worker loss is judged over WorkerLostAfter (30 s), so the scans of every worker need not
	// run at every tick (a quarter second): with thousands of workers they were a third of
	// the tick's CPU in the scheduler simulation.
	if due(now, &js.lastSilentCheck, silentCheckEvery) {
		for _, id := range js.silentWorkers(now) {
			js.workerLost(ctx, id)
		}
	}
	if due(now, &js.lastStoreSilentCheck, storeSilentCheckEvery) {
		js.loseSilentElsewhere(ctx, now)
	}
	if js.shared != nil {
		js.tickShared(ctx, now)
	}
	js.offerDeferredWebhooks(ctx)
}

// How often Tick looks for silent workers: its own (and repeats the stops they ignore, every
// StopRepeat), and the store's heartbeats of workers it does not know.
const (
	silentCheckEvery      = StopRepeat / 2
	storeSilentCheckEvery = time.Second
)

// due reports whether every has passed since *last (or the clock went back), and if so moves
// *last to now.
func due(now time.Time, last *time.Time, every time.Duration) bool {
	if now.Sub(*last) < every && !now.Before(*last) {
		return false
	}
	*last = now
	return true
}

// loseSilentElsewhere applies the worker-lost rule to the workers this engine does not know
// (another replica's, or ones from before a restart) that hold jobs in the store and whose
// heartbeats there stopped WorkerLostAfter ago. The engine judges its own workers by what it
// hears (silentWorkers).
func (js *Jobs) loseSilentElsewhere(ctx context.Context, now time.Time) {
	silent, err := js.store.Silent(ctx, now.Add(-WorkerLostAfter))
	if err != nil {
		js.log.Error("finding silent workers", "err", err)
		return
	}
	for _, worker := range silent {
		if !js.workers.known(worker) {
			js.log.Warn("worker lost: no heartbeat in the job store", "worker", worker, "after", WorkerLostAfter)
			js.loseWorker(ctx, worker)
		}
	}
}

// timeOut ends a running job past its execution timeout at now.
func (js *Jobs) timeOut(ctx context.Context, id string, now time.Time) {
	j, err := js.store.Update(ctx, id, From(EvTimeout), func(j *Job) error {
		if j.TimeoutMs <= 0 || now.Before(j.StartedAt.Add(time.Duration(j.TimeoutMs)*time.Millisecond)) {
			return errNotDue
		}
		j.Error = fmt.Sprintf("the job ran longer than its execution timeout of %d ms", j.TimeoutMs)
		js.ending(j, TimedOut, now)
		return nil
	}, !isSync(id))
	if err != nil {
		return // ended, taken again or expired meanwhile
	}
	js.ended(ctx, &j, InProgress, EvTimeout)
}

// errNotDue leaves a job whose timeout moved on (it was taken again) running.
var errNotDue = Errorf(KindConflict, "the job's execution timeout is not due")

// Run ticks every interval until ctx ends; each Tick's store calls run under ctx.
func (js *Jobs) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			js.Tick(ctx, js.clock.Now())
		}
	}
}

// Recover applies the restart rules to the jobs the store holds (it loaded them when it
// opened, queued jobs in their original order, and removed expired ones): jobs that were
// running follow the worker-lost rule (their workers died with the server), and the webhooks
// of finished jobs that were not delivered are sent again. It returns how many jobs are
// queued and how many of them went back to the queue now.
func (js *Jobs) Recover(ctx context.Context) (queued, requeued int, err error) {
	running, _, err := js.store.List(ctx, JobFilter{Status: Statuses(InProgress)})
	if err != nil {
		return 0, 0, fmt.Errorf("reading running jobs: %w", err)
	}
	for _, j := range running {
		if js.lostJob(ctx, "", j.ID) {
			requeued++
		}
	}
	if js.notify != nil {
		pending, _, err := js.store.List(ctx, JobFilter{Status: Statuses(Completed, Failed, TimedOut), WebhookPending: true})
		if err != nil {
			return 0, requeued, fmt.Errorf("reading undelivered webhooks: %w", err)
		}
		for i := range pending {
			if pending[i].Webhook != "" {
				js.sendWebhook(ctx, &pending[i])
			}
		}
		if len(pending) > 0 {
			js.log.Info("delivering webhooks the restart interrupted", "jobs", len(pending))
		}
	}
	st, err := js.store.Stats(ctx, "")
	if err != nil {
		return 0, requeued, err
	}
	return int(st.Queued) - requeued, requeued, nil
}
