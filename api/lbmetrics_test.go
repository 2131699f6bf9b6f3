package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// lbRecorder is an lbproxy.Observer that keeps what it heard, as "endpoint status".
type lbRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (r *lbRecorder) ObserveRequest(endpoint string, status int, elapsed time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if elapsed < 0 {
		status = -status
	}
	r.seen = append(r.seen, fmt.Sprintf("%s %d", endpoint, status))
}

// take returns what was heard since the last take, once it holds at least n observations
// (or after 5 s): the proxy observes a request after its answer is written, so the caller may
// read the answer first. A stray observation shows in the next take.
func (r *lbRecorder) take(n int) []string {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		if len(r.seen) >= n || time.Now().After(deadline) {
			out := r.seen
			r.seen = nil
			r.mu.Unlock()
			return out
		}
		r.mu.Unlock()
	}
}

// TestLoadBalancerObserved: every LOAD_BALANCER request answered for an endpoint of the
// caller's is observed with the status the caller got (the worker's, a 502 when the worker
// failed, a 503 when no worker came), through the connection loop and the general proxy
// alike; a request refused before its endpoint is known (no key, another user's endpoint) is
// not, so that no caller can make up series.
func TestLoadBalancerObserved(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang-up":
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
		case "/missing":
			http.NotFound(w, r)
		default:
			io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(backend.Close)
	u, _ := url.Parse(backend.URL)
	rec := &lbRecorder{}
	bal := &fakeBalancer{base: u}
	e := setup(t, setupOpts{quota: core.Quota{Minute: 1000}, balancer: bal, lbObserver: rec})
	lb := e.create(minimalLB)

	for _, tc := range []struct {
		name, method, path, auth string
		chunked                  bool
		want                     []string // observed
	}{
		{"a worker's 200", "GET", "/lb/" + lb + "/x", e.alice, false, []string{lb + " 200"}},
		{"a worker's 404", "GET", "/lb/" + lb + "/missing", e.alice, false, []string{lb + " 404"}},
		{"a worker hanging up", "GET", "/lb/" + lb + "/hang-up", e.alice, false, []string{lb + " 502"}},
		{"the general proxy: a chunked upload", "POST", "/lb/" + lb + "/x", e.alice, true, []string{lb + " 200"}},
		{"the general proxy: a worker hanging up", "POST", "/lb/" + lb + "/hang-up", e.alice, true, []string{lb + " 502"}},
		{"no key", "GET", "/lb/" + lb + "/x", "", false, nil},
		{"another user's endpoint", "GET", "/lb/" + lb + "/x", e.bob, false, nil},
		{"an unknown endpoint", "GET", "/lb/nosuchendpoint/x", e.alice, false, nil},
	} {
		var body io.Reader = strings.NewReader("")
		if tc.chunked {
			body = io.MultiReader(strings.NewReader("a"), strings.NewReader("b"))
		}
		req, _ := http.NewRequest(tc.method, e.srv.URL+tc.path, body)
		if tc.chunked {
			req.ContentLength = -1
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := rec.take(len(tc.want)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %s %s = %d, observed %q; want %q", tc.name, tc.method, tc.path, resp.StatusCode, got, tc.want)
		}
	}

	bal.fail = core.Errorf(core.KindUnavailable, "no worker of endpoint %s became ready within 1s", lb)
	if r := e.do("GET", "/lb/"+lb+"/x", e.alice, ""); r.status != http.StatusServiceUnavailable {
		t.Fatalf("no worker = %d %s; want 503", r.status, r.body)
	}
	if got, want := rec.take(1), []string{lb + " 503"}; !slices.Equal(got, want) {
		t.Errorf("no worker: observed %q; want %q (the endpoint's refusal)", got, want)
	}
}
