package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServeTransportErrors: what gantry serve answers outside the API's operations is
// problem+json too: another method on /metrics (405 with Allow), a path that is not clean (a
// 307 to the clean one), a request net/http refuses itself (431, 400).
func TestServeTransportErrors(t *testing.T) {
	t.Parallel()
	s := startServe(t, buildGantry(t), "--data", t.TempDir())
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct {
		method, path string
		status       int
		header       string // name: value of a header the answer must carry
		want         string
	}{
		{"POST", "/metrics", 405, "Allow: GET, HEAD",
			`{"title":"Method Not Allowed","status":405,"detail":"POST is not allowed here; allowed: GET, HEAD"}`},
		{"DELETE", "/metrics", 405, "Allow: GET, HEAD",
			`{"title":"Method Not Allowed","status":405,"detail":"DELETE is not allowed here; allowed: GET, HEAD"}`},
		{"GET", "/v2//serverless", 307, "Location: /v2/serverless",
			`{"title":"Temporary Redirect","status":307,"detail":"the path \"/v2//serverless\" is not clean; the same request to \"/v2/serverless\" is the one meant"}`},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest(tc.method, s.base+tc.path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		name, value, _ := strings.Cut(tc.header, ": ")
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" ||
			resp.Header.Get(name) != value || strings.TrimSpace(string(b)) != tc.want {
			t.Errorf("%s %s = %d %q (%s: %q) %s; want %d problem+json (%s) %s", tc.method, tc.path, resp.StatusCode,
				resp.Header.Get("Content-Type"), name, resp.Header.Get(name), b, tc.status, tc.header, tc.want)
		}
	}
	// What net/http refuses before any handler.
	raw := []struct {
		name, request string
		status        int
		want          string
	}{
		{"a URL over 64 KB", "GET /v2/serverless?x=" + strings.Repeat("a", 70<<10) + " HTTP/1.1\r\nHost: a\r\n\r\n", 431,
			`{"title":"Request Header Fields Too Large","status":431,"detail":"the request line and headers are larger than this server's limit of 64 KB"}`},
		{"a NUL in a header", "GET /healthz HTTP/1.1\r\nHost: a\r\nX-A: b\x00c\r\n\r\n", 400,
			`{"title":"Bad Request","status":400,"detail":"the request could not be read as HTTP/1.1 (a malformed request line or header, such as a control character in a header)"}`},
	}
	for _, tc := range raw {
		c, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		go func() { _, _ = io.WriteString(c, tc.request) }() // the server may answer before it reads all
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Errorf("%s: reading the answer: %v", tc.name, err)
			c.Close()
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" || strings.TrimSpace(string(b)) != tc.want {
			t.Errorf("%s = %d %q %s; want %d problem+json %s", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), b, tc.status, tc.want)
		}
	}
	if resp, err := client.Get(s.base + "/metrics"); err != nil || resp.StatusCode != 200 {
		t.Errorf("GET /metrics = %v, %v; want 200", resp, err)
	} else {
		resp.Body.Close()
	}
}
