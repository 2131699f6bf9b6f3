package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gantryhq/gantry/api"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
)

// TestLoadBalancerLeaderStepsDown: a replica that stops leading refuses the next request on a
// caller's open connection at once (503, Retry-After) and closes it; on a new connection it
// checks the key itself (401 for a bad one), and without the leader's peerUrl answers 503
// naming the setting; a request another replica forwarded is refused, not forwarded again.
func TestLoadBalancerLeaderStepsDown(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(backend.Close)
	u, _ := url.Parse(backend.URL)
	var following atomic.Bool
	e := setup(t, setupOpts{quota: core.Quota{Minute: 10000}, balancer: &fakeBalancer{base: u},
		leader: func() (bool, string, string) {
			if following.Load() {
				return false, "replica-b", ""
			}
			return true, "", ""
		}})
	path := api.LBPrefix + e.create(minimalLB)
	c := testkit.DialRaw(t, e.srv.URL)
	c.Send(c.Get(path+"/x", e.alice, ""))
	if resp, b := c.Read("GET"); resp.StatusCode != 200 || b != "ok" {
		t.Fatalf("GET while leading = %d %q; want the worker's 200", resp.StatusCode, b)
	}
	following.Store(true)
	c.Send(c.Get(path+"/x", e.alice, ""))
	if resp, b := c.Read("GET"); resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(b, "stopped leading") {
		t.Fatalf("GET on the same connection after stepping down = %d (Retry-After %q) %q; want 503, Retry-After 1", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if n, err := c.Br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after the refusal the connection read %d, %v; want EOF: closed", n, err)
	}

	for _, tc := range []struct {
		name, key, extra string
		status           int
		want             string
	}{
		{"bad key", "nope", "", 401, ""},
		{"no peerUrl", e.alice, "", 503, "set peerUrl"},
		{"forwarded again", e.alice, api.ForwardedHeader + ": 1\r\n", 503, "does not lead"},
	} {
		d := testkit.DialRaw(t, e.srv.URL)
		d.Send(d.Get(path+"/x", tc.key, tc.extra))
		resp, b := d.Read("GET")
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(b, tc.want) {
			t.Errorf("%s: GET on a new connection = %d %s %q; want %d problem+json with %q", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), b, tc.status, tc.want)
		}
	}
}

// TestLoadBalancerFollowerCountsRefusals: a replica that does not lead refuses a request for
// an endpoint that is not the caller's (or does not take LOAD_BALANCER requests) itself, and
// counts it against the caller's rate limits: such refusals use up the window and then get
// 429, as on the leader, and other calls find the window used.
func TestLoadBalancerFollowerCountsRefusals(t *testing.T) {
	t.Parallel()
	const quota = 5
	e := setup(t, setupOpts{quota: core.Quota{Minute: quota}, balancer: &fakeBalancer{},
		leader: func() (bool, string, string) { return false, "replica-b", "http://127.0.0.1:1" }})
	queue := e.create(minimalQueue) // alice's QUEUE endpoint
	for i, path := range []string{"/nope/x", "/nope", "/" + queue + "/x", "/nope/y", "/nope/z"} {
		r := e.as(e.bob, "GET", api.LBPrefix[:len(api.LBPrefix)-1]+path, "")
		wantR := fmt.Sprintf(`"minute";r=%d;`, quota-1-i)
		if r.status != 404 || !strings.Contains(r.header.Get("RateLimit"), wantR) {
			t.Errorf("refusal %d (%s) = %d RateLimit %q %s; want 404 with %s", i+1, path, r.status, r.header.Get("RateLimit"), r.body, wantR)
		}
	}
	r := e.as(e.bob, "GET", api.LBPrefix+"nope/x", "")
	if r.status != 429 || r.header.Get("Retry-After") == "" || r.header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("refusal past the quota = %d (Retry-After %q) %s; want 429 problem+json with Retry-After", r.status, r.header.Get("Retry-After"), r.body)
	}
	if r := e.as(e.bob, "GET", "/v2/serverless", ""); r.status != 429 {
		t.Errorf("another call after the refusals = %d; want 429: they used the window", r.status)
	}
}
