package core

import (
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
func (js *Jobs) offerDeferredWebhooks() {
	b := &js.webhookBacklog
	b.mu.Lock()
	n := min(len(b.jobs), webhookOfferBatch)
	batch := append([]deferredWebhook(nil), b.jobs[:n]...)
	b.jobs = append(b.jobs[:0], b.jobs[n:]...)
	b.mu.Unlock()
	for _, d := range batch {
		js.resendWebhook(d)
	}
}

// resendWebhook sends a deferred webhook if its job is still marked for that end.
func (js *Jobs) resendWebhook(d deferredWebhook) {
	e, err := js.lookup(d.endpoint, d.id)
	if err != nil {
		return // expired meanwhile
	}
	defer e.unlock()
	if !e.status().Terminal() {
		return // retried meanwhile: its next end sends it
	}
	rec, err := js.record(e)
	if err != nil || !rec.WebhookPending || !rec.EndedAt.Equal(d.endedAt) || rec.Webhook == "" {
		return
	}
	js.sendWebhook(rec)
}
