package lbproxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/lbproxy"
)

// The proxy forwards the caller's headers less hop-by-hop ones and the key, adds
// X-Forwarded-*, sends the worker's answer back less its hop-by-hop headers, and keeps one
// connection to the worker for consecutive requests.
func TestForwardsHeadersAndReusesConnections(t *testing.T) {
	t.Parallel()
	var host, got atomic.Value
	base, key, conns := lbBackend(t, func(w http.ResponseWriter, r *http.Request) {
		host.Store(r.Host)
		got.Store(r.Header.Clone())
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Connection", "X-Private")
		w.Header().Set("X-Private", "hop")
		w.Header().Set("X-Worker", "yes")
		io.WriteString(w, r.Method+" "+r.URL.RequestURI()+" "+string(b))
	})
	u, _ := url.Parse(base)
	resp := lbRequest(t, "POST", base+"/v1/chat?stream=false", key, `{"a":1}`, http.Header{
		"X-Forwarded-For": {"10.0.0.1"}, "Connection": {"X-Secret"}, "X-Secret": {"hop"}, "X-Keep": {"1", "2"},
		"Content-Type": {"application/json"},
	})
	if b := readAll(t, resp); resp.StatusCode != 200 || b != `POST /v1/chat?stream=false {"a":1}` {
		t.Fatalf("POST = %d %q; want the worker's answer", resp.StatusCode, b)
	}
	h := got.Load().(http.Header)
	for k, want := range map[string]string{
		"Authorization": "", "X-Secret": "", "X-Keep": "1,2", "Content-Type": "application/json",
		"X-Forwarded-For": "10.0.0.1, 127.0.0.1", "X-Forwarded-Host": u.Host, "X-Forwarded-Proto": "http",
	} {
		if v := strings.Join(h.Values(k), ","); v != want {
			t.Errorf("the worker saw %s %q; want %q", k, v, want)
		}
	}
	if resp.Header.Get("X-Private") != "" || resp.Header.Get("X-Worker") != "yes" {
		t.Errorf("answer headers %v; want X-Worker and no X-Private (named in the worker's Connection)", resp.Header)
	}
	if host.Load() == u.Host {
		t.Errorf("the worker saw Host %v; want its own address, not Gantry's", host.Load())
	}
	for i := range 5 {
		if resp := lbRequest(t, "GET", base+"/x", key, "", nil); resp.StatusCode != 200 || readAll(t, resp) != "GET /x " {
			t.Fatalf("GET %d = %d", i, resp.StatusCode)
		}
	}
	resp = lbRequest(t, "HEAD", base+"/x", key, "", nil)
	if b := readAll(t, resp); resp.StatusCode != 200 || b != "" {
		t.Errorf("HEAD = %d %q; want 200 and no body", resp.StatusCode, b)
	}
	if resp := lbRequest(t, "GET", base+"/after-head", key, "", nil); readAll(t, resp) != "GET /after-head " {
		t.Errorf("GET after a HEAD went wrong")
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("the proxy opened %d connections to the worker for 8 sequential requests; want 1", n)
	}
}

// A worker that closes its connections, saying so or not, costs no request: the proxy notices
// the close before reusing a connection (here it checks every reuse; by default, those after
// 1 ms idle).
func TestWorkerClosesConnections(t *testing.T) {
	t.Parallel()
	hungUp := make(chan struct{}, 1)
	base, key, conns, p, _ := lbBackendWith(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/close": // says so
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		case "/silent-close": // does not: answers, then hangs up
			conn, rw, _ := http.NewResponseController(w).Hijack()
			rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			rw.Flush()
			conn.Close()
			hungUp <- struct{}{}
		default:
			io.WriteString(w, "ok")
		}
	}, nil)
	lbproxy.SetPeekAfter(p, 0)
	for i, path := range []string{"/close", "/x", "/silent-close", "/x", "/silent-close", "/x"} {
		resp := lbRequest(t, "GET", base+path, key, "", nil)
		if b := readAll(t, resp); resp.StatusCode != 200 || (b != "ok" && b != "bye") {
			t.Fatalf("request %d, GET %s = %d %q; want 200", i, path, resp.StatusCode, b)
		}
		if path == "/silent-close" {
			<-hungUp // the next request finds the connection closed
		}
	}
	if n := conns.Load(); n != 4 {
		t.Errorf("the proxy opened %d connections; want 4 (one after each close)", n)
	}
}

// Answers of unknown length stream through as the worker writes them, trailers included.
func TestStreamsAnswers(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	base, key, _ := lbBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for i := range 3 {
			io.WriteString(w, "data: "+string(rune('a'+i))+"\n\n")
			w.(http.Flusher).Flush()
			<-next // the caller has read this event
		}
		w.Header().Set("X-Sum", "abc")
	})
	resp := lbRequest(t, "GET", base+"/events", key, "", nil)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := br.ReadString('\n')
		if want := "data: " + string(rune('a'+i)) + "\n"; err != nil || line != want {
			t.Fatalf("event %d = %q, %v; want %q before the worker writes the next", i, line, err, want)
		}
		br.ReadString('\n')
		next <- struct{}{}
	}
	io.Copy(io.Discard, br)
	if v := resp.Trailer.Get("X-Sum"); v != "abc" {
		t.Errorf("trailer X-Sum = %q; want the worker's", v)
	}
}

// A caller that goes away while the worker thinks closes the proxy's connection to the
// worker (the worker sees its request cancelled); an answer the worker breaks off reaches the
// caller as broken, never as complete.
func TestCancelAndCutShort(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{})
	base, key, _ := lbBackend(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/think":
			select {
			case <-r.Context().Done():
				close(cancelled)
			case <-time.After(10 * time.Second):
			}
		case "/cut":
			conn, rw, _ := http.NewResponseController(w).Hijack()
			rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")
			rw.Flush()
			conn.Close()
		case "/hints":
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			io.WriteString(w, "final")
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/think", nil)
	req.Header.Set("Authorization", key)
	if _, err := http.DefaultClient.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GET /think = %v; want the caller's own timeout", err)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the worker's request was not cancelled after the caller went away")
	}

	req, _ = http.NewRequest("GET", base+"/cut", nil)
	req.Header.Set("Authorization", key)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Errorf("an answer cut short read as complete: %d %q", resp.StatusCode, b)
		}
	}

	resp := lbRequest(t, "GET", base+"/hints", key, "", nil)
	if b := readAll(t, resp); resp.StatusCode != 200 || b != "final" {
		t.Errorf("an answer after 103 Early Hints = %d %q; want the final 200", resp.StatusCode, b)
	}
}

// Requests the loop does not carry (an upload of unknown length, a large one) go
// through the general proxy and arrive whole.
func TestLargeAndChunkedUploads(t *testing.T) {
	t.Parallel()
	base, key, _ := lbBackend(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		io.WriteString(w, r.Method+" OK "+strconv.FormatInt(n, 10))
	})
	big := strings.Repeat("x", 1<<20)
	if resp := lbRequest(t, "PUT", base+"/big", key, big, nil); readAll(t, resp) != "PUT OK 1048576" {
		t.Errorf("a 1 MiB upload did not arrive whole")
	}
	req, _ := http.NewRequest("POST", base+"/chunked", io.MultiReader(strings.NewReader("abc"), strings.NewReader("def")))
	req.Header.Set("Authorization", key)
	req.ContentLength = -1 // chunked
	resp, err := http.DefaultClient.Do(req)
	if err != nil || readAll(t, resp) != "POST OK 6" {
		t.Errorf("a chunked upload = %v; want 6 bytes at the worker", err)
	}
}

// Answers without a body (204, 304), a body that ends when the worker closes the connection
// (no length, HTTP/1.0 style) and a malformed answer: each reaches the caller as it should,
// and only connections fit for reuse are reused.
func TestAnswerFraming(t *testing.T) {
	t.Parallel()
	raw := func(w http.ResponseWriter, s string) {
		conn, rw, _ := http.NewResponseController(w).Hijack()
		rw.WriteString(s)
		rw.Flush()
		conn.Close()
	}
	base, key, conns := lbBackend(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.Header().Set("ETag", `"v1"`)
			w.WriteHeader(http.StatusNotModified)
		case "/until-close":
			raw(w, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it")
		case "/http10":
			raw(w, "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello")
		case "/garbage":
			raw(w, "SMTP ready\r\n\r\n")
		default:
			io.WriteString(w, "ok")
		}
	})
	for _, tc := range []struct {
		path   string
		status int
		body   string
	}{
		{"/204", 204, ""}, {"/x", 200, "ok"}, {"/304", 304, ""}, {"/x", 200, "ok"},
		{"/until-close", 200, "all of it"}, {"/x", 200, "ok"}, {"/http10", 200, "hello"}, {"/x", 200, "ok"},
	} {
		resp := lbRequest(t, "GET", base+tc.path, key, "", nil)
		if b := readAll(t, resp); resp.StatusCode != tc.status || b != tc.body {
			t.Errorf("GET %s = %d %q; want %d %q", tc.path, resp.StatusCode, b, tc.status, tc.body)
		}
	}
	// 204 and 304 leave the connection fit for reuse; the close-delimited and HTTP/1.0 answers
	// end theirs: three connections in all.
	if n := conns.Load(); n != 3 {
		t.Errorf("the proxy opened %d connections; want 3", n)
	}
	resp := lbRequest(t, "GET", base+"/garbage", key, "", nil)
	if b := readAll(t, resp); resp.StatusCode != http.StatusBadGateway || !strings.Contains(b, "did not answer") {
		t.Errorf("a malformed answer = %d %q; want a 502 problem", resp.StatusCode, b)
	}
}
