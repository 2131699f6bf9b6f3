package scheduler

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestWebhookRetriesUntil2xx(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Type") != "application/json" || r.Method != http.MethodPost {
			t.Errorf("webhook %s with Content-Type %q", r.Method, r.Header.Get("Content-Type"))
		}
		got <- string(b)
	}))
	defer srv.Close()
	w := &Webhooks{Backoff: time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan struct{})
	w.Notify(srv.URL, []byte(`{"id":"j1","status":"COMPLETED"}`), func() { close(done) })
	select {
	case b := <-got:
		if b != `{"id":"j1","status":"COMPLETED"}` || calls.Load() != 3 {
			t.Errorf("delivered %s after %d calls; want the body after 3", b, calls.Load())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("webhook not delivered")
	}
	select {
	case <-done: // the engine may now clear the job's delivery mark
	case <-time.After(10 * time.Second):
		t.Fatal("done not called after the delivery")
	}
}

func TestWebhookGivesUp(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	w := &Webhooks{Backoff: time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w.deliver(srv.URL, []byte(`{}`)) // synchronous: returns when it gives up
	if n := calls.Load(); n != WebhookAttempts {
		t.Errorf("%d attempts; want %d", n, WebhookAttempts)
	}
}
