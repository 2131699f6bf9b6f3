package httpecho

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testkit"
)

func newServer(t *testing.T, init time.Duration) (*Server, *httptest.Server) {
	t.Helper()
	s := &Server{cfg: Config{HealthPath: "/ping", InitDelay: init, WorkerID: "w1"}, started: time.Now()}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	_, ts := newServer(t, 0)
	for _, tc := range []struct {
		method, path, body string
		code               int
		has                string
	}{
		{"POST", "/any/path?x=1", "hello", 200, `"body":"hello"`},
		{"PUT", "/x", "", 200, `"method":"PUT"`},
		{"GET", "/ping", "", 200, ""},
		{"GET", "/status/418", "", 418, "status 418 from the worker"},
		{"GET", "/sleep?ms=5", "", 200, `{"slept_ms":5}`},
		{"POST", "/sink", "abc", 200, `"bytes":3,"sha256":"ba7816bf`},
		{"GET", "/stream?bytes=100000", "", 200, "abcdefghij"},
		{"GET", "/ws", "", 400, "WebSocket upgrade"},
	} {
		req, _ := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.has) {
			t.Errorf("%s %s = %d %.200s; want %d containing %q", tc.method, tc.path, resp.StatusCode, b, tc.code, tc.has)
		}
		if tc.path == "/stream?bytes=100000" && len(b) != 100000 {
			t.Errorf("/stream?bytes=100000 gave %d bytes", len(b))
		}
	}
}

func TestHealthTransitions(t *testing.T) {
	t.Parallel()
	s, ts := newServer(t, time.Hour)
	code := func() int {
		resp, err := http.Get(ts.URL + "/ping")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := code(); c != 204 {
		t.Errorf("health while initializing = %d; want 204", c)
	}
	s.started = time.Now().Add(-2 * time.Hour)
	if c := code(); c != 200 {
		t.Errorf("health once initialized = %d; want 200", c)
	}
	resp, _ := http.Post(ts.URL+"/_control/health?code=503", "", nil)
	resp.Body.Close()
	if c := code(); c != 503 {
		t.Errorf("health after /_control/health?code=503 = %d; want 503", c)
	}
}

// DialWebSocket opens a WebSocket to url (http://host/path) for tests.
func dialWebSocket(t *testing.T, url string) (net.Conn, *bufio.ReadWriter) {
	t.Helper()
	host := strings.TrimPrefix(url, "http://")
	path := "/"
	if i := strings.Index(host, "/"); i >= 0 {
		host, path = host[:i], host[i:]
	}
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rw := bufio.NewReadWriter(bufio.NewReader(conn), bufio.NewWriter(conn))
	key := "dGhlIHNhbXBsZSBub25jZQ=="
	fmt.Fprintf(rw, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", path, host, key)
	rw.Flush()
	resp, err := http.ReadResponse(rw.Reader, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 || resp.Header.Get("Sec-WebSocket-Accept") != AcceptKey(key) {
		t.Fatalf("upgrade = %d %v; want 101 with the accept key", resp.StatusCode, resp.Header)
	}
	return conn, rw
}

func TestWebSocketEcho(t *testing.T) {
	t.Parallel()
	_, ts := newServer(t, 0)
	_, rw := dialWebSocket(t, ts.URL+"/ws")
	mask := []byte{1, 2, 3, 4}
	big := bytes.Repeat([]byte("x"), 70000) // a 64-bit length
	for _, msg := range []struct {
		op      byte
		payload []byte
		wantOp  byte
	}{{opText, []byte("hello"), opText}, {opBinary, big, opBinary}, {opPing, []byte("p"), opPong}, {opClose, []byte{3, 232}, opClose}} {
		if err := WriteFrame(rw, true, msg.op, msg.payload, mask); err != nil {
			t.Fatal(err)
		}
		rw.Flush()
		fin, op, payload, err := ReadFrame(rw.Reader)
		if err != nil || !fin || op != msg.wantOp || !bytes.Equal(payload, msg.payload) {
			t.Fatalf("echo of op %d (%d bytes) = fin %v op %d %d bytes, %v", msg.op, len(msg.payload), fin, op, len(payload), err)
		}
	}
	if _, _, _, err := ReadFrame(rw.Reader); err == nil {
		t.Error("the connection stayed open after a close")
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv("PORT", "8000")
	t.Setenv("PORT_HEALTH", "")
	t.Setenv("HEALTH_CHECK_PATH", "")
	t.Setenv("HTTPECHO_INIT_MS", "250")
	c, err := ConfigFromEnv()
	if err != nil || c.Port != "8000" || c.HealthPort != "8000" || c.HealthPath != "/ping" || c.InitDelay != 250*time.Millisecond {
		t.Errorf("ConfigFromEnv() = %+v, %v; want port 8000 for both, /ping, 250ms", c, err)
	}
	t.Setenv("HTTPECHO_INIT_MS", "soon")
	if _, err := ConfigFromEnv(); err == nil {
		t.Error("ConfigFromEnv(HTTPECHO_INIT_MS=soon) = nil error")
	}
}

// FuzzReadFrame: any bytes decode or fail cleanly, and what WriteFrame writes, masked or
// not, reads back the same.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0x81, 0x85, 1, 2, 3, 4, 'i', 'g', 'o', 'h', 'n'}, []byte("hello"))
	f.Add([]byte{0x82, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, []byte{})
	f.Fuzz(func(t *testing.T, raw, payload []byte) {
		_, _, p, err := ReadFrame(bufio.NewReader(bytes.NewReader(raw)))
		if err == nil && len(p) > maxFrame {
			t.Fatalf("ReadFrame returned %d bytes, over the cap", len(p))
		}
		var b bytes.Buffer
		if err := WriteFrame(&b, true, opBinary, payload, []byte{9, 8, 7, 6}); err != nil {
			t.Fatal(err)
		}
		fin, op, got, err := ReadFrame(bufio.NewReader(&b))
		if err != nil || !fin || op != opBinary || !bytes.Equal(got, payload) {
			t.Fatalf("round trip of %d bytes = %v %d %d bytes, %v", len(payload), fin, op, len(got), err)
		}
	})
}

// lockedBuffer is a log sink safe for the server's goroutines and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestListensOnHost: with HOST set (the process pool sets 127.0.0.1), the worker listens on
// that address only, not on every interface, both on PORT and on a PORT_HEALTH of its own.
func TestListensOnHost(t *testing.T) {
	t.Setenv("HOST", "127.0.0.1")
	t.Setenv("PORT", "0")
	t.Setenv("PORT_HEALTH", "00") // another port than PORT: a second listener
	cfg, err := ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "127.0.0.1" {
		t.Fatalf("ConfigFromEnv().Host = %q; want HOST", cfg.Host)
	}
	var logs lockedBuffer
	cfg.Log = slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	re := regexp.MustCompile(`msg="http-echo listening" addr=(\S+)`)
	var addrs [][]string
	testkit.EventuallyWithin(t, 10*time.Second, "the worker logs both its listeners", func() bool {
		addrs = re.FindAllStringSubmatch(logs.String(), -1)
		return len(addrs) == 2
	})
	for _, m := range addrs {
		host, _, _ := net.SplitHostPort(m[1])
		if host != "127.0.0.1" {
			t.Errorf("the worker listens on %s; want 127.0.0.1 only", m[1])
		}
	}
	resp, err := http.Get("http://" + addrs[0][1] + "/ping")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /ping on %s = %d; want 200", addrs[0][1], resp.StatusCode)
	}
}
