package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/core"
)

// TestDrain: while Gantry stops gracefully, every new request but the workers' is refused with
// a 503 problem+json and Retry-After, and workers still post the results of the jobs they run
// (job-take finds no job).
func TestDrain(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := e.create(minimalQueue)
	tok := e.engine.RegisterWorker(ep, "w1")
	q := "?gpu=CPU&job_in_progress=0"
	id := e.run(ep, `{"n":1}`)
	queued := e.run(ep, `{"n":2}`)
	if r := e.workerCall("GET", "/v2/"+ep+"/job-take/w1"+q, tok, ""); r.status != 200 || !strings.Contains(r.body, id) {
		t.Fatalf("take = %d %s; want the first job", r.status, r.body)
	}

	e.api.Drain()
	for _, tc := range []struct{ name, method, path, auth, body string }{
		{"run", "POST", "/v2/" + ep + "/run", e.alice, `{"input":{}}`},
		{"runsync", "POST", "/v2/" + ep + "/runsync", e.alice, `{"input":{}}`},
		{"status", "GET", "/v2/" + ep + "/status/" + id, e.alice, ""},
		{"management", "GET", "/v2/serverless", e.alice, ""},
		{"load balancer", "GET", "/lb/" + ep + "/x", e.alice, ""},
		{"unknown path", "GET", "/nowhere", "", ""},
	} {
		r := e.do(tc.method, tc.path, tc.auth, tc.body)
		var p struct{ Status int }
		_ = json.Unmarshal([]byte(r.body), &p)
		if r.status != 503 || p.Status != 503 || r.header.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(r.body, "shutting down") || r.header.Get("Retry-After") == "" {
			t.Errorf("%s while draining = %d %q %s (Retry-After %q); want a 503 problem+json saying the server is shutting down, with Retry-After",
				tc.name, r.status, r.header.Get("Content-Type"), r.body, r.header.Get("Retry-After"))
		}
	}
	if r := e.do("GET", "/healthz", "", ""); r.status != 503 || !strings.Contains(r.body, "shutting down") {
		t.Errorf("/healthz while draining = %d %s; want 503 shutting down", r.status, r.body)
	}

	// The worker side still works: ping, no job to take, and the running job's result.
	if r := e.workerCall("GET", "/v2/"+ep+"/ping/w1"+q, tok, ""); r.status != 200 {
		t.Errorf("ping while draining = %d %s; want 200", r.status, r.body)
	}
	if r := e.workerCall("GET", "/v2/"+ep+"/job-take/w1"+q, tok, ""); r.status != 204 {
		t.Errorf("job-take while draining = %d %s; want 204 (no job), a job is queued", r.status, r.body)
	}
	if r := e.workerCall("POST", "/v2/"+ep+"/job-done/w1/"+id+q, tok, `{"output":"ok"}`); r.status != 200 {
		t.Errorf("job-done while draining = %d %s; want 200", r.status, r.body)
	}
	for job, want := range map[string]core.JobStatus{id: core.Completed, queued: core.InQueue} {
		if j, err := e.engine.Get(t.Context(), core.JobRef{Endpoint: ep, ID: job}, 0); err != nil || j.Status != want {
			t.Errorf("job %s after draining = %s, %v; want %s", job, j.Status, err, want)
		}
	}
}
