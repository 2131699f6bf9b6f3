package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestServeTransportErrors: what gantry serve answers outside the API's operations is
// problem+json too: another method on /metrics (405 with Allow), a path that is not clean (a
// 307 to the clean one).
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
	if resp, err := client.Get(s.base + "/metrics"); err != nil || resp.StatusCode != 200 {
		t.Errorf("GET /metrics = %v, %v; want 200", resp, err)
	} else {
		resp.Body.Close()
	}
}
