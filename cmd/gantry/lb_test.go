package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/worker/httpecho"
)

// lbEndpoint creates a LOAD_BALANCER endpoint on gantry/http-echo and returns its base and
// health URLs.
func lbEndpoint(t *testing.T, s *started, key, body string) (id, base, health string) {
	t.Helper()
	code, out := call(t, "POST", s.base+"/v2/serverless", key, body)
	if code != 201 {
		t.Fatalf("create = %d %s", code, out)
	}
	var ep struct {
		ID          string
		RequestUrls struct{ Base, Health string } `json:"requestUrls"`
	}
	_ = json.Unmarshal([]byte(out), &ep)
	return ep.ID, ep.RequestUrls.Base, ep.RequestUrls.Health
}

// rss returns a process's peak resident set in KiB (VmHWM).
func rss(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestLoadBalancerEndToEnd drives a LOAD_BALANCER endpoint on real gantry/http-echo worker
// processes: scale from zero, auth, routing across workers, no retries, WebSocket, streaming
// large bodies both ways without holding them, health transitions and scale-down after idle.
func TestLoadBalancerEndToEnd(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	data := t.TempDir()
	cfg := filepath.Join(data, "gantry.yaml") // short windows: scale-down after a burst within the test
	if err := os.WriteFile(cfg, []byte("autoscaler: {stableWindow: 6, panicWindow: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, bin, "--data", data, "--config", cfg)
	key := newKey(t, bin, data)
	id, base, health := lbEndpoint(t, s, key, `{"name":"web","type":"LOAD_BALANCER","templateId":"gantry-http-echo",
		"gpu":{"pools":["local"]},"workers":{"min":0,"max":3,"idleTimeout":5},"scaling":{"type":"REQUEST_COUNT","requestCount":1}}`)
	if base != s.base+"/lb/"+id || health != s.base+"/v2/"+id+"/health" {
		t.Fatalf("requestUrls = %s, %s", base, health)
	}

	// Scale from zero: the first request waits for a healthy worker. The key does not reach it.
	code, hdr, b := send(t, "POST", base+"/hello/world?x=1", key, `{"a":1}`)
	var echo struct {
		Worker, Method, Path, Query, Body string
		Headers                           map[string][]string
	}
	_ = json.Unmarshal(b, &echo)
	if code != 200 || echo.Path != "/hello/world" || echo.Query != "x=1" || echo.Body != `{"a":1}` || echo.Method != "POST" {
		t.Fatalf("first request = %d %s", code, b)
	}
	if _, leaked := echo.Headers["Authorization"]; leaked || hdr.Get("X-Worker-Id") != echo.Worker {
		t.Errorf("worker saw Authorization: %v; X-Worker-Id %q (want the key not forwarded, the worker's headers back)", leaked, hdr.Get("X-Worker-Id"))
	}

	// Auth like job operations: no key 401, a queue endpoint 409, unknown 404.
	for _, tc := range []struct {
		url, auth string
		code      int
	}{{base + "/x", "", 401}, {s.base + "/lb/nope/x", key, 404}} {
		if code, _, b := send(t, "GET", tc.url, tc.auth, ""); code != tc.code || !strings.Contains(string(b), `"status":`) {
			t.Errorf("GET %s = %d %s; want %d problem+json", tc.url, code, b, tc.code)
		}
	}

	// No retries: the worker's error comes back as is.
	if code, _, b := send(t, "GET", base+"/status/503", key, ""); code != 503 || !strings.Contains(string(b), "status 503 from the worker") {
		t.Errorf("GET /status/503 = %d %s; want the worker's own 503", code, b)
	}

	// Routing: concurrent slow requests scale the endpoint up and spread over the workers.
	workers := map[string]int{}
	var mu sync.Mutex
	deadline := time.Now().Add(30 * time.Second)
	for len(workers) < 2 && time.Now().Before(deadline) {
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				req, _ := http.NewRequest("GET", base+"/sleep?ms=300", nil)
				req.Header.Set("Authorization", key) // a bare key works too
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				req2, _ := http.NewRequest("GET", base+"/who", nil)
				req2.Header.Set("Authorization", "Bearer "+key)
				if resp, err := http.DefaultClient.Do(req2); err == nil {
					mu.Lock()
					workers[resp.Header.Get("X-Worker-Id")]++
					mu.Unlock()
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
	}
	if len(workers) < 2 {
		t.Fatalf("requests reached workers %v; want at least two", workers)
	}

	// Health transitions: a worker told to fail its health check leaves the rotation.
	waitHealth(t, health, key, func(h healthView) bool { return h.Workers.Idle+h.Workers.Running >= 2 })
	if code, _, _ := send(t, "POST", base+"/_control/health?code=500", key, ""); code != 204 {
		t.Fatalf("control = %d", code)
	}
	waitHealth(t, health, key, func(h healthView) bool { return h.Workers.Unhealthy == 1 })
	for range 10 {
		if code, _, _ := send(t, "GET", base+"/after", key, ""); code != 200 {
			t.Errorf("a request after one worker turned unhealthy = %d; want 200 from a healthy one", code)
		}
	}

	// WebSocket through the proxy.
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rw := bufio.NewReadWriter(bufio.NewReader(conn), bufio.NewWriter(conn))
	fmt.Fprintf(rw, "GET /lb/%s/ws HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", id, key)
	rw.Flush()
	resp, err := http.ReadResponse(rw.Reader, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("WebSocket upgrade through the proxy = %v, %v; want 101", resp, err)
	}
	httpecho.WriteFrame(rw, true, 0x1, []byte("hello over ws"), []byte{1, 2, 3, 4})
	rw.Flush()
	if _, op, msg, err := httpecho.ReadFrame(rw.Reader); err != nil || op != 0x1 || string(msg) != "hello over ws" {
		t.Errorf("WebSocket echo = %d %q, %v", op, msg, err)
	}
	conn.Close()

	// 256 MB up and 256 MB down through the proxy: Gantry's peak memory must not follow.
	before := rss(t, s.cmd.Process.Pid)
	const size = 256 << 20
	pr, pw := io.Pipe()
	go func() {
		chunk := make([]byte, 1<<20)
		for i := 0; i < size/len(chunk); i++ {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", base+"/sink", pr)
	req.Header.Set("Authorization", key)
	up, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(up.Body)
	up.Body.Close()
	if up.StatusCode != 200 || !strings.Contains(string(b), fmt.Sprintf(`"bytes":%d`, size)) {
		t.Errorf("POST /sink of %d bytes = %d %s", size, up.StatusCode, b)
	}
	req, _ = http.NewRequest("GET", base+fmt.Sprintf("/stream?bytes=%d", size), nil)
	req.Header.Set("Authorization", key)
	down, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, down.Body)
	down.Body.Close()
	if n != size {
		t.Errorf("GET /stream gave %d bytes; want %d", n, size)
	}
	if grew := rss(t, s.cmd.Process.Pid) - before; grew > 64<<10 {
		t.Errorf("gantry's peak memory grew by %d KiB moving 2 x 256 MB; want it streamed (< 64 MiB)", grew)
	}

	// Scale-down after idle: idleTimeout 5 s retires every idle worker (workers.min 0).
	waitHealth(t, health, key, func(h healthView) bool {
		return h.Workers.Idle+h.Workers.Running+h.Workers.Initializing == 0
	})
	s.stop(t)
}
