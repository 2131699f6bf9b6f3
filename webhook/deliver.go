// Package webhook delivers job webhooks: the HTTP POST of a job's final state, retried with
// backoff, on a bounded pool of goroutines, to the addresses its Policy allows. The job engine
// (core) decides when a webhook is due and keeps it marked until delivered; this package only
// carries it there (core.Notifier).
package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	neturl "net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gantryhq/gantry/internal/startstop"
)

// This file is delivery: the queue, the workers, the attempts and their backoff.

// Deliverer delivers job results: one POST of the final job (application/json), retried with
// exponential backoff (1 s, 2 s, 4 s, ... Attempts in all) until a 2xx answer.
//
// Deliveries run on a fixed pool of Workers goroutines fed by a queue of Queue deliveries;
// Notify refuses a delivery when the queue is full, and the job engine keeps it in the store
// and offers it again later. A delivery connects only to addresses Policy allows, checked on
// the address actually dialled (so a host name that resolves, or is rebound, to an internal
// address is refused too); a refused connection is logged and gives the delivery up at once.
// Redirects are never followed (a 3xx answer is a failed attempt), and no proxy from the
// environment is used. The job engine keeps each job marked for delivery until done is
// called, so a delivery that Close or a restart interrupted is made again.
//
// The zero value is ready to configure; Start starts its workers (deliveries Notify queued
// before wait for them) and Stop ends them (internal/startstop).
type Deliverer struct {
	// Policy is where deliveries may connect; the zero policy allows public addresses only.
	Policy Policy
	Log    *slog.Logger
	// Backoff is the first retry delay (default 1 s); tests shorten it.
	Backoff time.Duration
	// Workers is how many deliveries are in flight at most; 0 = DefaultWorkers.
	Workers int
	// Queue is how many deliveries wait for a worker at most; 0 = DefaultQueue.
	Queue int

	once    sync.Once // builds client and queue
	client  *http.Client
	queue   chan delivery
	run     startstop.Group // the workers; Stop cancels their attempts and retry waits
	stopped atomic.Bool     // Stop ran: Notify refuses

	waiting func() // tests: called when a delivery starts waiting to retry

	outcomes webhookOutcomes // deliveries by outcome (metrics.go)
}

// Attempts is how many times a webhook is tried.
const Attempts = 6

// DefaultWorkers and DefaultQueue size the delivery pool.
const (
	DefaultWorkers = 16
	DefaultQueue   = 1024
)

// webhookAttemptTimeout bounds one attempt: connecting, sending and reading the answer's head.
const webhookAttemptTimeout = 10 * time.Second

type delivery struct {
	url  string
	body []byte
	done func()
}

// errNotSent marks a delivery that no retry can make: a connection the policy refused, or a
// URL that does not parse.
type errNotSent struct{ err error }

func (e *errNotSent) Error() string { return e.err.Error() }

// init builds the client and the queue, once.
func (w *Deliverer) init() {
	w.once.Do(func() {
		if w.Log == nil {
			w.Log = slog.Default()
		}
		policy := w.Policy
		dialer := &net.Dialer{
			Timeout: webhookAttemptTimeout,
			// Control sees the address about to be connected, after name resolution.
			Control: func(_, address string, _ syscall.RawConn) error {
				ap, err := netip.ParseAddrPort(address)
				if err != nil {
					return &errNotSent{fmt.Errorf("webhook address %q: %w", address, err)}
				}
				if err := policy.CheckAddrPort(ap); err != nil {
					return &errNotSent{err}
				}
				return nil
			},
		}
		w.client = &http.Client{
			Transport: &http.Transport{
				Proxy:                 nil, // never $HTTP_PROXY: it would connect where the policy does not look
				DialContext:           dialer.DialContext,
				TLSHandshakeTimeout:   webhookAttemptTimeout,
				ResponseHeaderTimeout: webhookAttemptTimeout,
				MaxIdleConns:          64,
				MaxIdleConnsPerHost:   2,
				IdleConnTimeout:       30 * time.Second,
				ForceAttemptHTTP2:     true,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
		q := w.Queue
		if q <= 0 {
			q = DefaultQueue
		}
		w.queue = make(chan delivery, q)
	})
}

// Start starts the Workers delivery goroutines, bound to ctx; ErrStarted when they run already.
func (w *Deliverer) Start(ctx context.Context) error {
	w.init()
	if _, err := w.run.Begin(ctx); err != nil {
		return err
	}
	n := w.Workers
	if n <= 0 {
		n = DefaultWorkers
	}
	// Start returns once every worker runs, so that the first deliveries find them idle.
	var running sync.WaitGroup
	running.Add(n)
	for range n {
		if !w.run.Go(func(ctx context.Context) { running.Done(); w.work(ctx) }) {
			running.Done() // ctx ended already
		}
	}
	running.Wait()
	return nil
}

// Notify queues a delivery of body to url; done is called after a 2xx answer or once the
// delivery is given up (not when Stop interrupts it). It reports false, keeping nothing,
// when the queue is full or the deliveries were stopped.
func (w *Deliverer) Notify(url string, body []byte, done func()) bool {
	w.init()
	if w.stopped.Load() {
		return false
	}
	select {
	case w.queue <- delivery{url: url, body: body, done: done}:
		return true
	default:
		w.outcomes.deferred.Add(1)
		return false
	}
}

// Go runs fn, the job engine's part of a delivery, in a goroutine that Stop waits for, with
// the deliveries' context; false, running nothing, when they are not running.
func (w *Deliverer) Go(fn func(ctx context.Context)) bool { return w.run.Go(fn) }

// Stop stops the deliveries: attempts in flight and retry waits end at once, queued
// deliveries are dropped (their jobs stay marked for delivery), Notify refuses from then on,
// and it returns when the workers have stopped.
func (w *Deliverer) Stop() {
	w.stopped.Store(true)
	w.run.Stop()
}

// work delivers queued webhooks until ctx ends (Stop).
func (w *Deliverer) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-w.queue:
			if w.deliver(ctx, d.url, d.body) && d.done != nil {
				d.done()
			}
		}
	}
}

// deliver makes the attempts; it reports whether the delivery is finished (delivered or
// given up), false when ctx ended first.
func (w *Deliverer) deliver(ctx context.Context, url string, body []byte) (finished bool) {
	w.init()
	delay := w.Backoff
	if delay == 0 {
		delay = time.Second
	}
	for attempt := 1; ; attempt++ {
		err := w.attempt(ctx, url, body)
		switch {
		case err == nil:
			w.outcomes.delivered.Add(1)
			return true
		case ctx.Err() != nil:
			return false
		}
		if notSent := (*errNotSent)(nil); errors.As(err, &notSent) {
			w.Log.Warn("webhook not sent", "url", logURL(url), "err", notSent)
			w.outcomes.notSent.Add(1)
			return true
		}
		if attempt == Attempts {
			w.Log.Warn("webhook gave up", "url", logURL(url), "attempts", attempt, "err", redactErr(err, url))
			w.outcomes.gaveUp.Add(1)
			return true
		}
		if w.waiting != nil {
			w.waiting()
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		delay *= 2
	}
}

// attempt posts body once; nil means a 2xx answer.
func (w *Deliverer) attempt(ctx context.Context, url string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, webhookAttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return &errNotSent{fmt.Errorf("bad webhook URL: %w", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "gantry-webhook")
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.CopyN(io.Discard, resp.Body, 4<<10) // a short answer keeps the connection reusable
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode/100 == 3:
		return fmt.Errorf("answered %s, a redirect (webhooks do not follow redirects)", resp.Status)
	}
	return fmt.Errorf("answered %s", resp.Status)
}

// logURL is a webhook URL as logged: without its query, where receivers often keep a secret.
func logURL(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// redactErr hides the full URL (with its query) that net/http writes into its errors.
func redactErr(err error, raw string) string {
	return strings.ReplaceAll(err.Error(), raw, logURL(raw))
}
