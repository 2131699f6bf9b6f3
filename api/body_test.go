package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
)

// stalledBody is a request body that never sends a byte until the test ends.
type stalledBody struct{ done <-chan struct{} }

func (b stalledBody) Read([]byte) (int, error) { <-b.done; return 0, io.EOF }

// TestAuthBeforeBody: a request whose credentials fail is answered from its headers, without
// waiting for (or reading) its body: a 60 MB upload that never arrives still gets its 401 or
// 403 at once, and the connection is closed rather than drained.
func TestAuthBeforeBody(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := e.create(minimalQueue)
	e.engine.RegisterWorker(ep, "w1")
	tok2 := e.engine.RegisterWorker(ep, "w2")
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	for _, tc := range []struct {
		name, path, auth string
		status           int
	}{
		{"job-done without a token", "/v2/" + ep + "/job-done/w1/j1?gpu=CPU", "", 401},
		{"job-done with an unknown token", "/v2/" + ep + "/job-done/w1/j1?gpu=CPU", "gw_nope", 401},
		{"job-done with another worker's token", "/v2/" + ep + "/job-done/w1/j1?gpu=CPU", tok2, 403},
		{"job-file with a user key", "/v2/" + ep + "/job-file/w1/j1?name=a.bin", "Bearer " + e.alice, 401},
		{"runsync without a key", "/v2/" + ep + "/runsync", "", 401},
		{"runsync with an unknown key", "/v2/" + ep + "/runsync", "Bearer gk_nope", 401},
		{"runsync with a read-only key", "/v2/" + ep + "/runsync", "Bearer " + e.read, 403},
		{"create endpoint with a bare key", "/v2/serverless", e.alice, 401},
		{"create endpoint with an expired key", "/v2/serverless", "Bearer " + e.expired, 401},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, err := http.NewRequestWithContext(ctx, "POST", e.srv.URL+tc.path, stalledBody{done})
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = 60 << 20
		req.Header.Set("Content-Type", "application/json")
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Errorf("%s: %v; want %d before the body", tc.name, err, tc.status)
			cancel()
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != tc.status || !resp.Close || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s = %d (close %v) %s; want %d problem+json and the connection closed",
				tc.name, resp.StatusCode, resp.Close, b, tc.status)
		}
	}
}

// rawRequest opens a connection to the test server and sends a request head and the first
// part of its body; the caller sends the rest, or not.
func (e *env) rawRequest(method, path, auth string, length int, part string) net.Conn {
	e.t.Helper()
	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: gantry.test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", method, path, length)
	if auth != "" {
		head += "Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, head+"\r\n"+part); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// readRaw reads one response from a raw connection, failing the test after 10 s.
func readRaw(t *testing.T, c net.Conn, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the response body: %v", err)
	}
	return resp, string(b)
}

// TestSlowBody: a body that does not arrive within the body read timeout gets a problem+json
// 408 and its connection closed, whoever sends it.
func TestSlowBody(t *testing.T) {
	t.Parallel()
	e := setup(t, setupOpts{quota: core.Quota{Minute: 1000}, bodyTimeout: 200 * time.Millisecond})
	ep := e.create(minimalQueue)
	tok := e.engine.RegisterWorker(ep, "w1")
	for _, tc := range []struct {
		name, path, auth string
		status           int
	}{
		{"run with a key", "/v2/" + ep + "/run", "Bearer " + e.alice, 408},
		{"job-done with the worker's token", "/v2/" + ep + "/job-done/w1/j1?gpu=CPU", tok, 408},
		{"create endpoint with a key", "/v2/serverless", "Bearer " + e.alice, 408},
		{"run without a key", "/v2/" + ep + "/run", "", 401},
	} {
		c := e.rawRequest("POST", tc.path, tc.auth, 1000, `{"input":`)
		br := bufio.NewReader(c)
		resp, body := readRaw(t, c, br)
		if resp.StatusCode != tc.status || !resp.Close || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s = %d (close %v) %s; want %d problem+json and the connection closed", tc.name, resp.StatusCode, resp.Close, body, tc.status)
		}
		if tc.status == 408 && !strings.Contains(body, "did not arrive within 200ms") {
			t.Errorf("%s: body %s; want the timeout named", tc.name, body)
		}
		if n, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%s: after the answer read %q, %v; want EOF (connection closed)", tc.name, n, err)
		}
	}
	// A body that arrives in time is served as before, and the deadline does not outlive it.
	if r := e.as(e.alice, "POST", "/v2/"+ep+"/run", `{"input":{}}`); r.status != 200 {
		t.Errorf("run in time = %d %s; want 200", r.status, r.body)
	}
}

// TestBodyBudget: request bodies held at once are bounded server-wide; a request whose body
// would overspend the budget gets 503 with Retry-After before its body is read, and gets
// through once the bodies ahead of it are done.
func TestBodyBudget(t *testing.T) {
	t.Parallel()
	e := setup(t, setupOpts{quota: core.Quota{Minute: 1000}, bodyBudget: 1 << 20})
	ep := e.create(minimalQueue)
	big := `{"input":{"s":"` + strings.Repeat("x", 700_000) + `"}}`

	// The first big body arrives slowly: its bytes are held from its head on.
	c := e.rawRequest("POST", "/v2/"+ep+"/run", "Bearer "+e.alice, len(big), big[:100])
	testkit.Eventually(t, "the first body to be reserved", func() bool { return e.api.BodyBytesInFlight() == int64(len(big)) })

	r := e.as(e.alice, "POST", "/v2/"+ep+"/run", big)
	if r.status != 503 || r.header.Get("Retry-After") != "1" || r.header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(r.body, "request bodies") {
		t.Errorf("second big body = %d Retry-After %q %s; want 503 with Retry-After 1", r.status, r.header.Get("Retry-After"), r.body)
	}
	if r := e.as(e.alice, "POST", "/v2/"+ep+"/run", `{"input":{}}`); r.status != 200 {
		t.Errorf("small body beside it = %d %s; want 200", r.status, r.body)
	}

	// The first body completes and is answered; its bytes are given back.
	if _, err := io.WriteString(c, big[100:]); err != nil {
		t.Fatal(err)
	}
	resp, body := readRaw(t, c, bufio.NewReader(c))
	if resp.StatusCode != 200 {
		t.Fatalf("first big body = %d %s; want 200", resp.StatusCode, body)
	}
	testkit.Eventually(t, "the budget to be given back", func() bool { return e.api.BodyBytesInFlight() == 0 })
	if r := e.as(e.alice, "POST", "/v2/"+ep+"/run", big); r.status != 200 {
		t.Errorf("second big body retried = %d %s; want 200", r.status, r.body)
	}
}

// TestRateLimitCountedOnce: authenticating before the body does not count a request twice:
// every kind of operation takes exactly one from the window.
func TestRateLimitCountedOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, setupOpts{quota: core.Quota{Minute: 100}})
	ep := e.create(minimalQueue) // request 1
	used := 1
	for _, tc := range []struct{ name, method, path, auth, body string }{
		{"management read", "GET", "/v2/serverless", "Bearer " + e.alice, ""},
		{"management write", "PATCH", "/v2/serverless/" + ep, "Bearer " + e.alice, `{"name":"ep2"}`},
		{"run", "POST", "/v2/" + ep + "/run", e.alice, `{"input":{}}`},
		{"status", "GET", "/v2/" + ep + "/status/nope", "Bearer " + e.alice, ""},
		{"health", "GET", "/v2/" + ep + "/health", e.alice, ""},
	} {
		used++
		r := e.do(tc.method, tc.path, tc.auth, tc.body)
		want := `"minute";r=` + strconv.Itoa(100-used) + `;t=45`
		if got := r.header.Get("RateLimit"); got != want {
			t.Errorf("%s (%d) RateLimit = %q; want %q", tc.name, r.status, got, want)
		}
	}
}
