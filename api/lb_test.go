package api_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
)

// fakeBalancer hands every request to one backend, or fails as told.
type fakeBalancer struct {
	base     *url.URL
	fail     error
	acquired atomic.Int64
	released atomic.Int64
	// An Acquire that takes a token from noWorker finds no worker: it says so on waiting and
	// waits until its context ends, as the scheduler's does.
	noWorker, waiting chan struct{}
}

func (b *fakeBalancer) Acquire(ctx context.Context, _ string, _ time.Duration) (*url.URL, func(), error) {
	if b.fail != nil {
		return nil, nil, b.fail
	}
	select {
	case <-b.noWorker:
		b.waiting <- struct{}{}
		<-ctx.Done()
		return nil, nil, core.Errorf(core.KindUnavailable, "the request ended while it waited for a worker: %v", ctx.Err())
	default:
	}
	b.acquired.Add(1)
	return b.base, func() { b.released.Add(1) }, nil
}

const minimalLB = `{"name":"web","type":"LOAD_BALANCER","image":"gantry/http-echo","gpu":{"pools":["cpu"]},"scaling":{"type":"REQUEST_COUNT","requestCount":2}}`

func TestLoadBalancerProxy(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/hang-up": // the worker dies mid-request: the proxy answers 502 and does not retry
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
			return
		}
		w.Header().Set("X-Seen-Auth", r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusTeapot)
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+r.URL.RequestURI()+" "+string(b))
	}))
	t.Cleanup(backend.Close)
	u, _ := url.Parse(backend.URL)
	bal := &fakeBalancer{base: u}
	e := setup(t, setupOpts{quota: core.Quota{Minute: 7}, balancer: bal})
	lb := e.create(minimalLB)
	queue := e.create(minimalQueue)

	r := e.do("PUT", "/lb/"+lb+"/a/b%2Fc?x=1", e.alice, "body")
	if r.status != http.StatusTeapot || r.body != "PUT /a/b%2Fc?x=1 body" || r.header.Get("X-Seen-Auth") != "" {
		t.Errorf("proxied PUT = %d %q (worker saw Authorization %q); want the worker's 418, path and body as sent, no key", r.status, r.body, r.header.Get("X-Seen-Auth"))
	}
	if r.header.Get("RateLimit") == "" || r.header.Get("RateLimit-Policy") == "" {
		t.Errorf("proxied response headers %v; want RateLimit and RateLimit-Policy", r.header)
	}
	before := hits.Load()
	if r := e.do("GET", "/lb/"+lb+"/hang-up", "Bearer "+e.alice, ""); r.status != http.StatusBadGateway ||
		!strings.Contains(r.body, `"detail":"the worker of endpoint `+lb+` did not answer`) {
		t.Errorf("a worker hanging up = %d %s; want a 502 problem", r.status, r.body)
	}
	if n := hits.Load() - before; n != 1 {
		t.Errorf("the worker got the failed request %d times; want 1 (no retries)", n)
	}
	// The same through the general proxy, which carries uploads of unknown length.
	req, _ := http.NewRequest("POST", e.srv.URL+"/lb/"+lb+"/hang-up", io.MultiReader(strings.NewReader("a"), strings.NewReader("b")))
	req.Header.Set("Authorization", e.alice)
	req.ContentLength = -1 // chunked
	if resp, err := e.srv.Client().Do(req); err != nil {
		t.Errorf("a chunked upload to a worker hanging up: %v", err)
	} else if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(string(b), `"detail":"the worker of endpoint `+lb+` did not answer`) {
		t.Errorf("a chunked upload to a worker hanging up = %d %s; want a 502 problem", resp.StatusCode, b)
	}
	for _, tc := range []struct {
		name, path, auth string
		status           int
		detail           string
	}{
		{"no key", "/lb/" + lb + "/x", "", 401, ""},
		{"another user's endpoint", "/lb/" + lb + "/x", e.bob, 404, "not found"},
		{"a jobs key for other endpoints", "/lb/" + lb + "/x", e.jobs, 403, "may not use endpoint"},
		{"a queue endpoint", "/lb/" + queue + "/x", e.alice, 409, "QUEUE endpoint"},
		{"no endpoint", "/lb/", e.alice, 404, "name an endpoint"},
		{"rate limited", "/lb/" + lb + "/x", e.alice, 429, "minute window"},
	} {
		r := e.do("GET", tc.path, tc.auth, "")
		if r.status != tc.status || !strings.Contains(r.body, tc.detail) || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: GET %s = %d %s; want a %d problem saying %q", tc.name, tc.path, r.status, r.body, tc.status, tc.detail)
		}
	}
	if a, rel := bal.acquired.Load(), bal.released.Load(); a != rel || a != 3 {
		t.Errorf("acquired %d, released %d; want every acquired worker released", a, rel)
	}
}

func TestLoadBalancerNoWorker(t *testing.T) {
	t.Parallel()
	bal := &fakeBalancer{fail: core.Errorf(core.KindUnavailable, "no worker of endpoint x became ready within 1s")}
	e := setup(t, setupOpts{quota: core.Quota{Minute: 100}, balancer: bal})
	lb := e.create(minimalLB)
	r := e.do("POST", "/lb/"+lb+"/generate", e.alice, `{}`)
	if r.status != 503 || !strings.Contains(r.body, "became ready within") || !strings.Contains(r.body, `"error":`) {
		t.Errorf("no worker = %d %s; want a 503 problem with the RunPod-style error field", r.status, r.body)
	}
	// Health works on LOAD_BALANCER endpoints too (requestUrls.health).
	if r := e.as(e.alice, "GET", "/v2/"+lb+"/health", ""); r.status != 200 {
		t.Errorf("health of a LOAD_BALANCER endpoint = %d %s", r.status, r.body)
	}
}

// Refusals inside the proxy's connection loop are the same problem+json answers as
// elsewhere, with the rate-limit headers, and leave the connection usable.
func TestLoadBalancerConnectionLoopRefusals(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(backend.Close)
	u, _ := url.Parse(backend.URL)
	e := setup(t, setupOpts{quota: core.Quota{Minute: 10000}, balancer: &fakeBalancer{base: u}})
	path := "/lb/" + e.create(minimalLB)
	key := e.alice
	c := testkit.DialRaw(t, e.srv.URL)
	for _, tc := range []struct {
		path, key string
		status    int
	}{
		{path + "/x", key, 200},
		{path + "/x", "nope", 401},
		{"/lb/unknownendpoint/x", key, 404},
		{path + "/x", key, 200},
	} {
		c.Send(c.Get(tc.path, tc.key, ""))
		resp, b := c.Read("GET")
		if resp.StatusCode != tc.status {
			t.Fatalf("GET %s with key %q = %d %q; want %d", tc.path, tc.key, resp.StatusCode, b, tc.status)
		}
		if tc.status != 200 && (resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(b, `"status":`)) {
			t.Errorf("refusal %d = %v %q; want a problem", tc.status, resp.Header, b)
		}
		if tc.status != 401 && resp.Header.Get("RateLimit") == "" {
			t.Errorf("GET %s: no RateLimit header", tc.path)
		}
	}
	c.Send("HEAD " + path + "/x HTTP/1.1\r\nHost: " + c.Host + "\r\nAuthorization: nope\r\n\r\n")
	if resp, b := c.Read("HEAD"); resp.StatusCode != 401 || b != "" {
		t.Fatalf("HEAD refused = %d %q; want 401 and no body", resp.StatusCode, b)
	}
	c.Send(c.Get(path+"/x", key, ""))
	if resp, b := c.Read("GET"); resp.StatusCode != 200 || b != "ok" {
		t.Fatalf("after a refused HEAD = %d %q", resp.StatusCode, b)
	}
}

// rawWorker is a worker that answers every request on a connection with the same 2-byte
// answer, reading nothing but request heads: its own cost stays out of the proxy's figures.
func rawWorker(tb testing.TB) *url.URL {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for {
					for { // the request head, up to its empty line (the bench sends no bodies)
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
					}
					if _, err := io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}
}

// BenchmarkLoadBalancerLoop measures a keep-alive GET through the proxy's connection loop:
// admission (key, rate limits, endpoint, worker) and the two loopback round trips. Its
// allocations per request are the loop's budget; the figure counts the whole process.
func BenchmarkLoadBalancerLoop(b *testing.B) {
	e := setup(b, setupOpts{quota: core.Quota{}, balancer: &fakeBalancer{base: rawWorker(b)}})
	lb := e.create(minimalLB)
	u, _ := url.Parse(e.srv.URL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	req := []byte("GET /lb/" + lb + "/x HTTP/1.1\r\nHost: " + u.Host + "\r\nAuthorization: Bearer " + e.alice + "\r\n\r\n")
	br := bufio.NewReader(conn)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := conn.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || string(body) != "ok" {
			b.Fatalf("GET = %d %q, %v; want 200 ok", resp.StatusCode, body, err)
		}
	}
}
