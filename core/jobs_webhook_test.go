package core_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// A webhook the notifier has no room for (its queue is full) is not lost: the job stays
// marked for delivery in the store, and a later Tick offers it again, body and all.
func TestWebhookWaitsWhileNotifierIsFull(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.hooks.full.Store(true)
	j := r.submit(`{"a":1}`, func(s *core.Submission) { s.Webhook = "http://hook.test/full" })
	r.take("w")
	if err := r.jobs.Done(t.Context(), "ep1", "w", j.ID, core.Result{Output: json.RawMessage(`"out"`)}); err != nil {
		t.Fatal(err)
	}
	recv(t, r.hooks.refused, "the refused delivery")
	// Still full: refused again, kept. Each refusal is signalled from inside Notify, before the
	// job joins the backlog that Tick offers again, so tick until the offer comes.
	tickUntil(t, r, r.hooks.refused, "the delivery refused again")
	if rec, err := r.store.GetJob(j.ID); err != nil || !rec.WebhookPending {
		t.Fatalf("stored job while its webhook waits: %+v, %v; want webhookPending", rec, err)
	}

	r.hooks.full.Store(false)
	tickUntil(t, r, r.hooks.delivered, "the delivery once there is room")
	var hook core.WebhookBody
	r.hooks.mu.Lock()
	_ = json.Unmarshal(r.hooks.sent["http://hook.test/full"], &hook)
	r.hooks.mu.Unlock()
	if hook.ID != j.ID || hook.Status != core.Completed || string(hook.Output) != `"out"` || string(hook.Input) != `{"a":1}` {
		t.Errorf("webhook = %+v; want the completed job with its input", hook)
	}
	if rec, err := r.store.GetJob(j.ID); err != nil || rec.WebhookPending { // done ran before delivered
		t.Fatalf("stored job after the delivery: %+v, %v; want webhookPending cleared", rec, err)
	}
}

// tickUntil ticks the engine until c receives, for up to 10 s.
func tickUntil(t *testing.T, r *rig, c <-chan string, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		r.jobs.Tick(t.Context(), r.clock.Now())
		select {
		case <-c:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("no %s", what)
}
