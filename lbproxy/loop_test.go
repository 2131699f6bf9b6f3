package lbproxy_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/lbproxy"
)

// One caller connection carries pipelined requests, requests the loop hands back to net/http
// (a chunked upload, an upgrade-less request with a head too large for its buffer, a request
// for another route) and loop requests again after them; each gets its own answer, in order.
func TestConnectionLoop(t *testing.T) {
	t.Parallel()
	base, key, conns := lbBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "x-echo" { // a protocol switch: echo what comes, upper-cased
			conn, rw, _ := http.NewResponseController(w).Hijack()
			defer conn.Close()
			rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x-echo\r\n\r\n")
			rw.Flush()
			line, _ := rw.ReadString('\n')
			rw.WriteString(strings.ToUpper(line))
			rw.Flush()
			return
		}
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+r.URL.RequestURI()+" "+string(b)+" "+r.Header.Get("X-Secret")+r.Header.Get("X-Keep"))
	})
	path := strings.TrimPrefix(base, "http://")
	path = path[strings.Index(path, "/"):]
	c := testkit.DialRaw(t, base)
	c.Send(c.Get(path+"/a?x=1", key, "") + c.Get(path, key, "Connection: X-Secret\r\nX-Secret: hop\r\nX-Keep: k\r\n") +
		"POST " + path + "/b HTTP/1.1\r\nHost: " + c.Host + "\r\nAuthorization: " + key + "\r\nContent-Length: 3\r\n\r\nabc")
	for _, want := range []string{"GET /a?x=1  ", "GET /  k", "POST /b abc "} {
		if resp, b := c.Read("GET"); resp.StatusCode != 200 || b != want {
			t.Fatalf("pipelined answer = %d %q; want 200 %q", resp.StatusCode, b, want)
		}
	}
	// Handed back: a head whose lines end in a bare LF (net/http accepts those), a chunked
	// upload, a head larger than the loop's buffer, a QUEUE-side call.
	c.Send("GET " + path + "/lf HTTP/1.1\nHost: " + c.Host + "\nAuthorization: Bearer " + key + "\n\n")
	if resp, b := c.Read("GET"); resp.StatusCode != 200 || b != "GET /lf  " {
		t.Fatalf("bare-LF head = %d %q", resp.StatusCode, b)
	}
	c.Send("POST " + path + "/chunked HTTP/1.1\r\nHost: " + c.Host + "\r\nAuthorization: " + key +
		"\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	if resp, b := c.Read("POST"); resp.StatusCode != 200 || b != "POST /chunked abc " {
		t.Fatalf("chunked upload = %d %q", resp.StatusCode, b)
	}
	c.Send(c.Get(path+"/big", key, "X-Keep: "+strings.Repeat("k", 6000)+"\r\n"))
	if resp, b := c.Read("GET"); resp.StatusCode != 200 || b != "GET /big  "+strings.Repeat("k", 6000) {
		t.Fatalf("large head = %d %q", resp.StatusCode, b[:min(len(b), 40)])
	}
	c.Send(c.Get("/v2/serverless/nope", key, ""))
	if resp, _ := c.Read("GET"); resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("another route on the same connection = %d", resp.StatusCode)
	}
	// And the loop again, which closes the connection when asked to.
	c.Send(c.Get(path+"/again", key, "Connection: close\r\n"))
	if resp, b := c.Read("GET"); resp.StatusCode != 200 || b != "GET /again  " || !resp.Close {
		t.Fatalf("after the hand-back = %d %q (close %v); want 200 and Connection: close", resp.StatusCode, b, resp.Close)
	}
	if n, err := c.Br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after Connection: close the proxy read %d, %v; want EOF", n, err)
	}
	// A protocol switch after loop requests is handed back and passes through.
	u := testkit.DialRaw(t, base)
	u.Send(u.Get(path+"/x", key, ""))
	u.Read("GET")
	u.Send(u.Get(path+"/ws", key, "Connection: Upgrade\r\nUpgrade: x-echo\r\n"))
	if resp, err := http.ReadResponse(u.Br, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade after a loop request = %v, %v; want 101", resp, err)
	}
	u.Send("hello\n")
	if line, err := u.Br.ReadString('\n'); err != nil || line != "HELLO\n" {
		t.Fatalf("through the switched connection: %q, %v; want the worker's echo", line, err)
	}
	if n := conns.Load(); n > 2 {
		t.Errorf("the proxy opened %d connections to the worker; want at most 2 (its own pool and the general proxy's)", n)
	}
}

// A request the admission refuses inside the loop gets the admission's answer, with the
// headers it set (no body for HEAD), and leaves the connection usable.
func TestConnectionLoopRefusals(t *testing.T) {
	t.Parallel()
	base, key, _, _, adm := lbBackendWith(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }, nil)
	path := strings.TrimPrefix(base, "http://")
	path = path[strings.Index(path, "/"):]
	c := testkit.DialRaw(t, base)
	for _, tc := range []struct {
		method, path, key string
		status            int
		body              string
	}{
		{"GET", path + "/x", key, 200, "ok"},
		{"GET", path + "/x", "nope", 401, `{"status":401,"detail":"no such key"}` + "\n"},
		{"GET", "/lb/other/x", key, 404, `{"status":404,"detail":"no endpoint \"other\""}` + "\n"},
		{"HEAD", "/lb/other/x", key, 404, ""},
		{"GET", path + "/x", key, 200, "ok"},
	} {
		c.Send(tc.method + " " + tc.path + " HTTP/1.1\r\nHost: " + c.Host + "\r\nAuthorization: " + tc.key + "\r\n\r\n")
		resp, b := c.Read(tc.method)
		if resp.StatusCode != tc.status || b != tc.body {
			t.Fatalf("%s %s with key %q = %d %q; want %d %q", tc.method, tc.path, tc.key, resp.StatusCode, b, tc.status, tc.body)
		}
		if tc.key == key && resp.Header.Get("RateLimit") == "" {
			t.Errorf("%s %s: no RateLimit header; want the one the admission set", tc.method, tc.path)
		}
	}
	if a, r := adm.admitted.Load(), adm.released.Load(); a != 2 || r != 2 {
		t.Errorf("admitted %d, released %d; want 2 and 2", a, r)
	}
}

// A refusal that wraps ErrReconnect is written, then the loop closes the connection, so that
// the caller's next request comes on a new one. The replicas' mark (ForwardedHeader) reaches
// the worker through neither the loop nor the general proxy.
func TestConnectionLoopReconnect(t *testing.T) {
	t.Parallel()
	base, key, _ := lbBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, string(b)+"["+r.Header.Get(lbproxy.ForwardedHeader)+"]")
	})
	path := strings.TrimPrefix(base, "http://")
	path = path[strings.Index(path, "/"):]
	mark := lbproxy.ForwardedHeader + ": 1\r\n"
	c := testkit.DialRaw(t, base)
	c.Send(c.Get(path+"/x", key, mark))
	if resp, b := c.Read("GET"); resp.StatusCode != 200 || b != "[]" {
		t.Fatalf("a loop request with the mark = %d %q; want 200 %q: the worker does not get the mark", resp.StatusCode, b, "[]")
	}
	c.Send(c.Get("/lb/moved/x", key, ""))
	if resp, b := c.Read("GET"); resp.StatusCode != 503 || !strings.Contains(b, "served elsewhere now") {
		t.Fatalf("a request refused with ErrReconnect = %d %q; want the refusal (503)", resp.StatusCode, b)
	}
	if n, err := c.Br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after a refusal with ErrReconnect the proxy read %d, %v; want EOF: the connection closed", n, err)
	}
	d := testkit.DialRaw(t, base) // a chunked upload: the general proxy
	d.Send("POST " + path + "/c HTTP/1.1\r\nHost: " + d.Host + "\r\nAuthorization: " + key + "\r\n" + mark +
		"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	if resp, b := d.Read("POST"); resp.StatusCode != 200 || b != "abc[]" {
		t.Fatalf("a chunked upload with the mark = %d %q; want 200 %q", resp.StatusCode, b, "abc[]")
	}
}

// Shutdown as gantry serve does it: the server's base context ends (long polls end at once),
// then Proxy.Shutdown ends idle loop connections at once and lets a busy one finish its answer,
// which tells the caller the connection closes; a request waiting for a worker is answered 503.
func TestConnectionLoopShutdown(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free() // a failed check does not leave the worker's handler waiting
	started := make(chan struct{}, 1)
	serving, stopServing := context.WithCancel(context.Background())
	defer stopServing()
	base, key, _, p, adm := lbBackendWith(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	}, serving)
	path := strings.TrimPrefix(base, "http://")
	path = path[strings.Index(path, "/"):]
	idle, busy, waiting := testkit.DialRaw(t, base), testkit.DialRaw(t, base), testkit.DialRaw(t, base)
	for _, c := range []*testkit.RawConn{idle, busy, waiting} {
		c.Send(c.Get(path+"/x", key, ""))
		c.Read("GET")
	}
	busy.Send(busy.Get(path+"/slow", key, ""))
	<-started
	adm.noWorker <- struct{}{}
	waiting.Send(waiting.Get(path+"/x", key, ""))
	<-adm.waiting

	stopServing()
	if resp, _ := waiting.Read("GET"); resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Errorf("the request waiting for a worker when serving stopped = %d (close %v); want 503 and Connection: close", resp.StatusCode, resp.Close)
	}
	done := make(chan error, 1)
	go func() { done <- p.Shutdown(context.Background()) }()
	if _, err := idle.Br.ReadByte(); err != io.EOF {
		t.Errorf("the idle connection after Shutdown: %v; want EOF", err)
	}
	select { // the idle connection is closed, so Shutdown has begun: it must still wait
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) while an answer was in flight", err)
	default:
	}
	free()
	if resp, b := busy.Read("GET"); resp.StatusCode != 200 || b != "ok" || !resp.Close {
		t.Errorf("the busy connection's answer = %d %q (close %v); want 200 ok and Connection: close", resp.StatusCode, b, resp.Close)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown = %v", err)
	}
}
