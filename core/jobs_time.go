package core

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

type deadlineKind uint8

const (
	dlExpire deadlineKind = iota
	dlTimeout
)

// deadline is when something may be due for a job; stale ones (the job moved on) are skipped.
type deadline struct {
	at   int64 // Unix nanoseconds
	key  JobKey
	kind deadlineKind
}

// deadlineBlock is how many deadlines one block of the heap holds (32 KiB).
const deadlineBlock = 1024

// deadlineHeap is a binary min-heap of deadlines by time (container/heap), stored in blocks of
// deadlineBlock: it grows and shrinks a block at a time. One slice of every live job's
// deadline grew by copying itself whole under dmu, which every Submit takes, and with a
// million live jobs that held submissions for tens of milliseconds, a stall that grew with
// the backlog.
type deadlineHeap struct {
	blocks [][]deadline // each of length deadlineBlock; entry i is blocks[i/deadlineBlock][i%deadlineBlock]
	n      int
}

func (h *deadlineHeap) at(i int) *deadline {
	return &h.blocks[i/deadlineBlock][i%deadlineBlock]
}

func (h *deadlineHeap) Len() int           { return h.n }
func (h *deadlineHeap) Less(i, k int) bool { return h.at(i).at < h.at(k).at }
func (h *deadlineHeap) Swap(i, k int)      { a, b := h.at(i), h.at(k); *a, *b = *b, *a }
func (h *deadlineHeap) Push(x any) {
	if h.n == len(h.blocks)*deadlineBlock {
		h.blocks = append(h.blocks, make([]deadline, deadlineBlock))
	}
	*h.at(h.n) = x.(deadline)
	h.n++
}
func (h *deadlineHeap) Pop() any {
	h.n--
	d := *h.at(h.n)
	// Free a block once two are empty, so a heap that shrinks and grows around a block's edge
	// does not allocate each time.
	if k := len(h.blocks); k >= 2 && h.n <= (k-2)*deadlineBlock {
		h.blocks[k-1] = nil
		h.blocks = h.blocks[:k-1]
	}
	return d
}

func (js *Jobs) schedule(key JobKey, at time.Time, kind deadlineKind) {
	js.dmu.Lock()
	heap.Push(&js.deadlines, deadline{at: at.UnixNano(), key: key, kind: kind})
	js.dmu.Unlock()
}

// Tick applies everything due at now: expired jobs are removed, running jobs past their
// execution timeout become TIMED_OUT, and silent workers lose their jobs. Run it about every
// quarter second; tests call it with an injected clock.
func (js *Jobs) Tick(now time.Time) {
	needSync := false
	for {
		js.dmu.Lock()
		if js.deadlines.Len() == 0 || js.deadlines.at(0).at > now.UnixNano() {
			js.dmu.Unlock()
			break
		}
		d := heap.Pop(&js.deadlines).(deadline)
		js.dmu.Unlock()
		needSync = js.due(d, now) || needSync
	}
	_ = js.sync(needSync)
	for _, id := range js.silentWorkers(now) {
		js.workerLost(id)
	}
	js.offerDeferredWebhooks()
}

// due handles one deadline and reports whether a sync is needed.
func (js *Jobs) due(d deadline, now time.Time) bool {
	e := js.lock(d.key)
	if e == nil {
		return false
	}
	defer e.unlock()
	switch d.kind {
	case dlExpire:
		if now.UnixNano() < e.expiresAt {
			return false
		}
		id := d.key.String()
		if rec := e.attached(); e.state == stRunning && rec != nil {
			js.release(rec.WorkerID, id, true)
		}
		js.count(js.epName(e.ep), e.status(), "", e.low)
		js.dropHot(e)
		delete(e.sh.jobs, d.key)
		e.gone = true
		if !e.status().Terminal() {
			e.wake() // waiters of a job that expired before it ended
		}
		if err := js.store.DeleteJob(id); err != nil {
			js.log.Error("deleting an expired job", "job", id, "err", err)
		}
	case dlTimeout:
		rec := e.attached()
		if e.state == stRunning && rec != nil && !now.Before(rec.StartedAt.Add(time.Duration(rec.TimeoutMs)*time.Millisecond)) {
			rec.Error = fmt.Sprintf("the job ran longer than its execution timeout of %d ms", rec.TimeoutMs)
			return js.end(e, rec, EvTimeout, TimedOut)
		}
	}
	return false
}

// Run ticks every interval until ctx ends.
func (js *Jobs) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			js.Tick(js.clock.Now())
		}
	}
}

// Recover loads the stored jobs after a restart: queued jobs are queued again in their
// original order, jobs that were running follow the worker-lost rule (their workers died with
// the server), finished jobs are kept for the rest of their retention, expired ones deleted, and
// the webhooks of finished jobs that were not delivered are sent again.
func (js *Jobs) Recover() (queued, requeued int, err error) {
	now := js.clock.Now()
	type found struct {
		seq uint64
		key JobKey
		lj  liveJob
		rec *Job // kept only for jobs that were running
	}
	var all []found
	var expired []string
	var webhooks []*Job // ended jobs whose webhook was not delivered before the restart
	err = js.store.ScanJobs(func(rec *Job) {
		if rec.Seq > js.seq.Load() {
			js.seq.Store(rec.Seq)
		}
		key, ok := ParseJobKey(rec.ID)
		if !ok || !now.Before(rec.ExpiresAt) {
			expired = append(expired, rec.ID)
			return
		}
		f := found{seq: rec.Seq, key: key, lj: liveJob{expiresAt: rec.ExpiresAt.UnixNano(), ep: js.epIntern(rec.Endpoint),
			state: stateOf(rec.Status), sync: rec.Sync, low: rec.Policy.LowPriority}}
		if rec.Status == InProgress {
			f.rec = rec
		}
		if rec.WebhookPending && rec.Status.Terminal() && rec.Webhook != "" {
			webhooks = append(webhooks, rec)
		}
		all = append(all, f)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("reading stored jobs: %w", err)
	}
	slices.SortFunc(all, func(a, b found) int { return cmpU(a.seq, b.seq) })
	for _, f := range all {
		sh := js.shard(f.key)
		sh.mu.Lock()
		e := &entry{liveJob: f.lj, key: f.key, sh: sh}
		endpoint := js.epName(e.ep)
		js.count(endpoint, "", e.status(), e.low)
		if f.rec != nil {
			f.rec.WorkerID = ""
			js.lostJob(e, f.rec)
			if e.state == stQueued {
				requeued++
			}
		} else if e.state == stQueued {
			queued++
		}
		js.schedule(f.key, time.Unix(0, e.expiresAt), dlExpire)
		queuedNow := e.state == stQueued
		e.unlock()
		if queuedNow {
			js.dispatch.Enqueue(endpoint, f.key)
		}
	}
	for _, id := range expired {
		if err := js.store.DeleteJob(id); err != nil && !errors.Is(err, ErrNotFound) {
			return queued, requeued, err
		}
	}
	if js.notify != nil {
		for _, rec := range webhooks {
			js.sendWebhook(rec)
		}
		if len(webhooks) > 0 {
			js.log.Info("delivering webhooks the restart interrupted", "jobs", len(webhooks))
		}
	}
	return queued, requeued, js.sync(requeued > 0)
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
