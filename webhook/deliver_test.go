package webhook

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// local allows the loopback receivers of these tests.
var local = Policy{AllowPrivate: true}

// start starts w's workers.
func start(t *testing.T, w *Deliverer) {
	t.Helper()
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// wait fails the test unless c is closed or sends within 10 s.
func wait[T any](t *testing.T, c <-chan T, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
	}
}

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
	w := &Deliverer{Policy: local, Backoff: time.Millisecond, Log: quiet}
	start(t, w)
	defer w.Stop()
	done := make(chan struct{})
	if !w.Notify(srv.URL, []byte(`{"id":"j1","status":"COMPLETED"}`), func() { close(done) }) {
		t.Fatal("Notify = false with an empty queue; want true")
	}
	select {
	case b := <-got:
		if b != `{"id":"j1","status":"COMPLETED"}` || calls.Load() != 3 {
			t.Errorf("delivered %s after %d calls; want the body after 3", b, calls.Load())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("webhook not delivered")
	}
	wait(t, done, "done after the delivery") // the engine may now clear the job's delivery mark
	wantOutcomes(t, w, map[string]float64{"delivered": 1, "gave_up": 0})
}

// wantOutcomes checks the deliveries' counts by outcome, as /metrics shows them.
func wantOutcomes(t *testing.T, w *Deliverer, want map[string]float64) {
	t.Helper()
	ch := make(chan prometheus.Metric, 8)
	w.Collector().Collect(ch)
	close(ch)
	got := map[string]float64{}
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		got[pb.GetLabel()[0].GetValue()] = pb.GetCounter().GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("deliveries %s = %v; want %v (all: %v)", k, got[k], v, got)
		}
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
	var log syncBuffer
	w := &Deliverer{Policy: local, Backoff: time.Millisecond, Log: slog.New(slog.NewTextHandler(&log, nil))}
	start(t, w)
	defer w.Stop()
	if !w.deliver(context.Background(), srv.URL+"/hook?token=s3cret", []byte(`{}`)) { // synchronous: returns when it gives up
		t.Error("deliver = false (interrupted); want true (given up)")
	}
	if n := calls.Load(); n != Attempts {
		t.Errorf("%d attempts; want %d", n, Attempts)
	}
	if l := log.String(); !strings.Contains(l, "webhook gave up") || !strings.Contains(l, srv.URL+"/hook") || strings.Contains(l, "s3cret") {
		t.Errorf("log:\n%s\nwant \"webhook gave up\" with the URL, without its query", l)
	}
	wantOutcomes(t, w, map[string]float64{"delivered": 0, "gave_up": 1})
}

// syncBuffer is a log destination tests read while deliveries write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// By default a delivery connects to no internal address: not to a literal loopback address,
// nor to a host name that resolves to one (the check is on the address dialled, so DNS
// rebinding does not pass it). The refused delivery is logged and given up at once (done is
// called; with a one-hour backoff a retry would never end in time), and the receiver sees
// nothing. With AllowPrivate the same URLs are delivered.
func TestWebhookRefusesInternalAddresses(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer srv.Close()
	port := srv.URL[strings.LastIndexByte(srv.URL, ':'):]
	self := Policy{AllowPrivate: true, Self: []netip.AddrPort{netip.MustParseAddrPort(srv.Listener.Addr().String())}}
	for _, tt := range []struct {
		url    string
		policy Policy
		rule   string
	}{
		{srv.URL, Policy{}, "a loopback address"},
		{"http://localhost" + port + "/hook?token=s3cret", Policy{}, "a loopback address"},
		{"http://[::ffff:127.0.0.1]" + port, Policy{}, "a loopback address"},
		{"http://localhost" + port + "/v2/x/run", self, "Gantry's own address"},
	} {
		url := tt.url
		var log syncBuffer
		w := &Deliverer{Policy: tt.policy, Backoff: time.Hour, Log: slog.New(slog.NewTextHandler(&log, nil))}
		start(t, w)
		done := make(chan struct{})
		w.Notify(url, []byte(`{}`), func() { close(done) })
		wait(t, done, "done for the refused delivery to "+url)
		w.Stop()
		if n := calls.Load(); n != 0 {
			t.Errorf("delivery to %s reached the receiver %d times; want refused", url, n)
		}
		if l := log.String(); strings.Count(l, "webhook not sent") != 1 || !strings.Contains(l, tt.rule) || strings.Contains(l, "s3cret") {
			t.Errorf("log of the delivery to %s:\n%s\nwant one \"webhook not sent\" saying %q, without the query", url, l, tt.rule)
		}
	}
	for _, url := range []string{srv.URL, "http://localhost" + port + "/hook"} {
		w := &Deliverer{Policy: local, Backoff: time.Hour, Log: quiet}
		start(t, w)
		if !w.deliver(context.Background(), url, []byte(`{}`)) {
			t.Errorf("deliver(%s) with AllowPrivate interrupted", url)
		}
		w.Stop()
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("receiver got %d deliveries with AllowPrivate; want 2", n)
	}
}

// A receiver that redirects (307, which would repeat the POST with its body) to another
// local port is not followed: the second server sees no request.
func TestWebhookDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	var inner atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { inner.Add(1) }))
	defer target.Close()
	var outer atomic.Int32
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		outer.Add(1)
		http.Redirect(w, r, target.URL+"/internal", http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	w := &Deliverer{Policy: local, Backoff: time.Millisecond, Log: quiet}
	start(t, w)
	defer w.Stop()
	if !w.deliver(context.Background(), redirector.URL, []byte(`{"secret":1}`)) {
		t.Error("deliver interrupted")
	}
	if i, o := inner.Load(), outer.Load(); i != 0 || o != Attempts {
		t.Errorf("redirect target got %d requests, redirector %d; want 0 and %d (a redirect is a failed attempt)", i, o, Attempts)
	}
}

// Deliveries run on a bounded pool: with 2 workers and a queue of 1, two slow receivers take
// both workers, a third delivery waits in the queue, and a fourth is refused (the engine keeps
// it in the store); no more than 2 are ever in flight.
func TestWebhookPoolIsBounded(t *testing.T) {
	t.Parallel()
	var inFlight, most atomic.Int32
	arrived := make(chan struct{}, 8)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		arrived <- struct{}{}
		<-release
		inFlight.Add(-1)
	}))
	defer srv.Close()
	w := &Deliverer{Policy: local, Workers: 2, Queue: 1, Backoff: time.Millisecond, Log: quiet}
	start(t, w)
	defer w.Stop()
	var done sync.WaitGroup
	notify := func() bool {
		done.Add(1)
		if w.Notify(srv.URL, []byte(`{}`), done.Done) {
			return true
		}
		done.Done()
		return false
	}
	if first, second := notify(), notify(); !first || !second {
		t.Fatal("Notify refused a delivery with idle workers")
	}
	wait(t, arrived, "first delivery")
	wait(t, arrived, "second delivery")
	if !notify() {
		t.Error("Notify refused the third delivery with room in the queue")
	}
	if notify() {
		t.Error("Notify took a fourth delivery with both workers busy and the queue full; want it refused")
	}
	close(release)
	wait(t, arrived, "the queued delivery")
	all := make(chan struct{})
	go func() { done.Wait(); close(all) }()
	wait(t, all, "done for the three deliveries taken")
	if m := most.Load(); m != 2 {
		t.Errorf("%d deliveries in flight at most; want 2 (the pool size)", m)
	}
}

// Stop stops retries at once: a delivery waiting (an hour) to retry ends without done, so
// its job stays marked for delivery and a restart makes it again.
func TestWebhookCloseStopsRetries(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	waiting := make(chan struct{}, 1)
	w := &Deliverer{Policy: local, Backoff: time.Hour, Log: quiet, waiting: func() { waiting <- struct{}{} }}
	start(t, w)
	var called atomic.Bool
	w.Notify(srv.URL, []byte(`{}`), func() { called.Store(true) })
	wait(t, waiting, "the wait before the second attempt")
	closed := make(chan struct{})
	go func() { w.Stop(); close(closed) }()
	wait(t, closed, "Stop during a retry wait")
	if called.Load() {
		t.Error("done called for a delivery Stop interrupted; want the job left marked")
	}
	if w.Notify(srv.URL, []byte(`{}`), nil) {
		t.Error("Notify after Stop = true; want false")
	}
}

// The job engine's part of a delivery, run by Go, is tracked: Stop waits for it, and Go
// refuses work before Start and after Stop (the engine then keeps the job marked).
func TestWebhookStopWaitsForGo(t *testing.T) {
	t.Parallel()
	w := &Deliverer{Policy: local, Log: quiet}
	if w.Go(func(context.Context) {}) {
		t.Error("Go ran work before Start")
	}
	start(t, w)
	release, ended := make(chan struct{}), make(chan struct{})
	if !w.Go(func(ctx context.Context) { <-release; close(ended) }) {
		t.Fatal("Go refused work while started")
	}
	stopped := make(chan struct{})
	go func() { w.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while work Go started still ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	wait(t, stopped, "Stop once the work returned")
	select {
	case <-ended:
	default:
		t.Error("Stop returned before the work ended")
	}
	if w.Go(func(context.Context) {}) {
		t.Error("Go ran work after Stop")
	}
}
