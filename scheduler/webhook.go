package scheduler

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"time"
)

// Webhooks delivers job results: one POST of the final job (application/json), retried with
// exponential backoff (1 s, 2 s, 4 s, ... WebhookAttempts in all) until a 2xx answer. The job
// engine keeps each job marked for delivery until done is called, so a delivery a restart
// interrupted is made again.
type Webhooks struct {
	Client *http.Client
	Log    *slog.Logger
	// Backoff is the first retry delay (default 1 s); tests shorten it.
	Backoff time.Duration
}

// WebhookAttempts is how many times a webhook is tried.
const WebhookAttempts = 6

// Notify delivers body to url in the background, then calls done (after a 2xx answer, or
// once it gives up).
func (w *Webhooks) Notify(url string, body []byte, done func()) {
	go func() {
		w.deliver(url, body)
		if done != nil {
			done()
		}
	}()
}

func (w *Webhooks) deliver(url string, body []byte) {
	client := w.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	delay := w.Backoff
	if delay == 0 {
		delay = time.Second
	}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			cancel()
			w.Log.Warn("webhook not sent: bad URL", "url", url, "err", err)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "gantry-webhook")
		resp, err := client.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return
			}
		}
		if attempt == WebhookAttempts {
			w.Log.Warn("webhook gave up", "url", url, "attempts", attempt, "err", err)
			return
		}
		time.Sleep(delay)
		delay *= 2
	}
}
