package core

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// webhookOfferBatch is how many deferred webhooks one Tick offers the notifier again.
const webhookOfferBatch = 64

// webhookBacklog holds the webhooks the notifier had no room for. Only the job's key and end
// are kept: the body waits in the store (the job stays marked for delivery) and is built
// again when the webhook is offered, so a long backlog holds no bodies in memory. A restart
// forgets the backlog, and Recover finds the marked jobs instead.
type webhookBacklog struct {
	mu   sync.Mutex
	jobs []deferredWebhook
}

type deferredWebhook struct {
	endpoint, id string
	endedAt      time.Time
}

// deferWebhook puts a webhook the notifier refused in the backlog.
func (js *Jobs) deferWebhook(endpoint, id string, endedAt time.Time) {
	b := &js.webhookBacklog
	b.mu.Lock()
	b.jobs = append(b.jobs, deferredWebhook{endpoint: endpoint, id: id, endedAt: endedAt})
	n := len(b.jobs)
	b.mu.Unlock()
	if n == 1 || n%1000 == 0 {
		js.log.Warn("webhook deliveries are behind: waiting in the store", "waiting", n)
	}
}

// offerDeferredWebhooks offers the notifier the oldest deferred webhooks again, up to
// webhookOfferBatch; those it refuses again go back to the backlog.
func (js *Jobs) offerDeferredWebhooks(ctx context.Context) {
	b := &js.webhookBacklog
	b.mu.Lock()
	n := min(len(b.jobs), webhookOfferBatch)
	batch := append([]deferredWebhook(nil), b.jobs[:n]...)
	b.jobs = append(b.jobs[:0], b.jobs[n:]...)
	b.mu.Unlock()
	for _, d := range batch {
		js.resendWebhook(ctx, d)
	}
}

// resendWebhook sends a deferred webhook if its job is still marked for that end.
func (js *Jobs) resendWebhook(ctx context.Context, d deferredWebhook) {
	j, err := js.read(ctx, JobRef{Endpoint: d.endpoint, ID: d.id})
	if err != nil || !j.Status.Terminal() || !j.WebhookPending || !j.EndedAt.Equal(d.endedAt) || j.Webhook == "" {
		return // expired, or retried meanwhile (its next end sends it), or delivered
	}
	js.sendWebhook(ctx, &j)
}

// ended is every terminal status.
var ended = Statuses(Completed, Failed, Cancelled, TimedOut)

// WebhookBody is what a webhook receives: the final job plus its input.
type WebhookBody struct {
	ID            string          `json:"id"`
	Status        JobStatus       `json:"status"`
	Output        json.RawMessage `json:"output,omitempty"`
	Error         string          `json:"error,omitempty"`
	DelayTime     int64           `json:"delayTime"`
	ExecutionTime int64           `json:"executionTime"`
	Retries       int             `json:"retries"`
	WorkerID      string          `json:"workerId,omitempty"`
	Input         json.RawMessage `json:"input,omitempty"`
}

// sendWebhook hands the job's final state to the notifier; the record is no longer changed.
// The delivery and its delivered mark outlive ctx (the request or tick that ended the job):
// they run detached from its cancellation, keeping its values (its trace).
func (js *Jobs) sendWebhook(ctx context.Context, rec *Job) {
	ctx = context.WithoutCancel(ctx)
	now := js.clock.Now()
	body := WebhookBody{ID: rec.ID, Status: rec.Status, Output: rec.Output, Error: rec.Error,
		DelayTime: rec.DelayTime(now), ExecutionTime: rec.ExecutionTime(now), Retries: rec.Retries, WorkerID: rec.WorkerID}
	url, endpoint, endedAt := rec.Webhook, rec.Endpoint, rec.EndedAt
	send := func(context.Context) {
		// Once the end is on disk, a crash cannot take the job back to a state that would end
		// it, and webhook it, a second time. A job's end is synced but for a runsync job's.
		if isSync(body.ID) {
			keep := func(*Job) error { return nil }
			if _, err := js.store.Update(ctx, body.ID, ended, keep, true); err != nil {
				return
			}
		}
		if in, err := js.store.Input(ctx, body.ID); err == nil {
			body.Input = in
		}
		b, err := json.Marshal(body)
		if err != nil {
			js.log.Error("encoding a webhook", "job", body.ID, "err", err)
			return
		}
		if !js.notify.Notify(url, b, func() { js.webhookDelivered(ctx, endpoint, body.ID, endedAt) }) {
			js.deferWebhook(endpoint, body.ID, endedAt)
		}
	}
	if r, ok := js.notify.(webhookRunner); ok {
		if !r.Go(send) { // stopping: the job stays marked, and the backlog or a restart offers it
			js.deferWebhook(endpoint, body.ID, endedAt)
		}
		return
	}
	go send(context.Background())
}

// webhookRunner is a Notifier that also runs the engine's part of each delivery (the sync of
// a runsync job's end, reading the job's input) in goroutines it tracks, so that stopping it
// waits for them too (webhook.Deliverer). Go reports false, running nothing, once it stops.
// The part's store writes use context.Background all the same: a job's end must reach the
// disk before its webhook goes, whether or not the deliveries are stopping.
type webhookRunner interface {
	Go(fn func(ctx context.Context)) bool
}

// webhookDelivered clears the delivery mark of the job's end at endedAt (not of a later end,
// after a retry). The write is not synced: a crash before it only delivers the webhook again.
// ctx is sendWebhook's, detached from the cancellation of the request that ended the job.
func (js *Jobs) webhookDelivered(ctx context.Context, endpoint, id string, endedAt time.Time) {
	ref := JobRef{Endpoint: endpoint, ID: id}
	now := js.clock.Now()
	_, _ = js.store.Update(ctx, id, ended, func(j *Job) error {
		if err := check(ref, j, now); err != nil {
			return err // expired meanwhile
		}
		if !j.WebhookPending || !j.EndedAt.Equal(endedAt) {
			return errNotDue // retried and ended again: that end has its own delivery
		}
		j.WebhookPending = false
		return nil
	}, false)
}

// WebhookOrphanAfter is how long after its job ended an undelivered webhook counts as
// orphaned on a shared store: longer than a delivery's whole schedule (webhook.Attempts
// attempts of at most 10 s each, with 1+2+4+8+16 s of backoff between them). The replica that
// ended the job may have died with the delivery in flight; the leader delivers such webhooks
// again (at least once: a replica that is alive but far behind may deliver it too).
const WebhookOrphanAfter = 3 * time.Minute

// webhookSweepEvery is how often the leader looks for orphaned webhooks.
const webhookSweepEvery = time.Minute

// redeliverOrphanedWebhooks offers the notifier again every webhook still marked for
// delivery WebhookOrphanAfter after its job ended. A webhook it offered stays marked until
// delivered, so one a sweep offered is offered again only after the next WebhookOrphanAfter.
func (js *Jobs) redeliverOrphanedWebhooks(ctx context.Context, now time.Time) {
	pending, _, err := js.store.List(ctx, JobFilter{Status: Statuses(Completed, Failed, TimedOut), WebhookPending: true})
	if err != nil {
		js.log.Error("finding undelivered webhooks", "err", err)
		return
	}
	sh := js.shared
	n := 0
	for i := range pending {
		j := &pending[i]
		if j.Webhook == "" || now.Sub(j.EndedAt) < WebhookOrphanAfter {
			continue
		}
		if last, ok := sh.offered[j.ID]; ok && now.Sub(last) < WebhookOrphanAfter {
			continue // offered by an earlier sweep: its delivery may still be retrying
		}
		sh.offered[j.ID] = now
		js.sendWebhook(ctx, j)
		n++
	}
	for id, at := range sh.offered {
		if now.Sub(at) >= WebhookOrphanAfter {
			delete(sh.offered, id)
		}
	}
	if n > 0 {
		js.log.Warn("delivering webhooks whose replica did not (it stopped, or fell far behind)", "jobs", n)
	}
}
