package lbproxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gantryhq/gantry/lbproxy"
)

// testKey is the one key the fake admission accepts, with or without "Bearer ".
const testKey = "k-test"

// refusal is the fake admission's error: the status it answers with, and why.
type refusal struct {
	status int
	detail string
}

func (r *refusal) Error() string { return r.detail }

// writerKey carries the response the fake admission sets its headers on.
type writerKey struct{}

// fakeAdmitter admits requests for endpoint "ep" with testKey to one worker, and renders
// refusals as small problem+json answers, as package api does.
type fakeAdmitter struct {
	host               string
	admitted, released atomic.Int64
	// An Admit that takes a token from noWorker finds no worker: it says so on waiting and
	// waits until its context ends, as the scheduler's balancer does.
	noWorker, waiting chan struct{}
}

func (f *fakeAdmitter) WithWriter(ctx context.Context, w http.ResponseWriter) context.Context {
	return context.WithValue(ctx, writerKey{}, w)
}

func (f *fakeAdmitter) Admit(ctx context.Context, endpoint, authorization string) (lbproxy.Target, func(), error) {
	if strings.TrimPrefix(authorization, "Bearer ") != testKey {
		return lbproxy.Target{}, nil, &refusal{http.StatusUnauthorized, "no such key"}
	}
	ctx.Value(writerKey{}).(http.ResponseWriter).Header().Set("RateLimit", "limit=100, remaining=99")
	if endpoint == "moved" { // served elsewhere now: refused, and the connection is to close
		return lbproxy.Target{}, nil, fmt.Errorf("%w (%w)", &refusal{http.StatusServiceUnavailable, "served elsewhere now"}, lbproxy.ErrReconnect)
	}
	if endpoint != "ep" {
		return lbproxy.Target{}, nil, &refusal{http.StatusNotFound, "no endpoint " + strconv.Quote(endpoint)}
	}
	select {
	case <-f.noWorker:
		f.waiting <- struct{}{}
		<-ctx.Done()
		return lbproxy.Target{}, nil, &refusal{http.StatusServiceUnavailable, "no worker: " + ctx.Err().Error()}
	default:
	}
	f.admitted.Add(1)
	return lbproxy.Target{Endpoint: endpoint, Host: f.host}, func() { f.released.Add(1) }, nil
}

func (f *fakeAdmitter) Refuse(_ context.Context, w http.ResponseWriter, _ *http.Request, err error) {
	status := http.StatusInternalServerError
	var r *refusal
	var we *lbproxy.WorkerError
	switch {
	case errors.As(err, &r):
		status = r.status
	case errors.As(err, &we):
		status = http.StatusBadGateway
	}
	body := `{"status":` + strconv.Itoa(status) + `,"detail":` + strconv.Quote(err.Error()) + "}\n"
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// lbBackend starts handler as a worker behind the proxy and returns the endpoint's proxied
// base URL (…/lb/ep), the key and a count of the connections the proxy opened to the worker.
func lbBackend(t *testing.T, handler http.HandlerFunc) (base, key string, conns *atomic.Int64) {
	t.Helper()
	base, key, conns, _, _ = lbBackendWith(t, handler, nil)
	return base, key, conns
}

// lbBackendWith is lbBackend on a server whose base context is serving (nil: none), with the
// proxy and its admission. The server answers paths outside /lb/ with a 404 problem.
func lbBackendWith(t *testing.T, handler http.HandlerFunc, serving context.Context) (base, key string, conns *atomic.Int64, p *lbproxy.Proxy, adm *fakeAdmitter) {
	t.Helper()
	conns = new(atomic.Int64)
	backend := httptest.NewUnstartedServer(handler)
	backend.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	backend.Start()
	t.Cleanup(backend.Close)
	u, _ := url.Parse(backend.URL)
	adm = &fakeAdmitter{host: u.Host, noWorker: make(chan struct{}, 1), waiting: make(chan struct{}, 1)}
	p = lbproxy.New(adm, nil)
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, lbproxy.Prefix) {
			p.ServeHTTP(w, r)
			return
		}
		adm.Refuse(r.Context(), w, r, &refusal{http.StatusNotFound, "no operation at " + r.URL.Path})
	}))
	if serving != nil {
		front.Config.BaseContext = func(net.Listener) context.Context { return serving }
	}
	front.Start()
	t.Cleanup(front.Close)
	return front.URL + lbproxy.Prefix + "ep", testKey, conns, p, adm
}

func lbRequest(t *testing.T, method, url, key, body string, header http.Header) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body == "" {
		req.Body = nil
	}
	for k, vv := range header {
		req.Header[k] = vv
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return string(b)
}
