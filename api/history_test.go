package api_test

import (
	"context"
	"testing"
	"time"
)

// TestEndpointHistory: GET /v2/{ep}/metrics answers the jobs that ended, by status and with
// their times, for the endpoint's owner only; a range other than 1h or 24h is a 422.
func TestEndpointHistory(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := e.create(minimalQueue)
	tok := e.engine.RegisterWorker(ep, "w1")
	q := "?gpu=CPU&job_in_progress=0"

	// One job completes after 3 s queued and 2 s of execution, one fails, one is cancelled
	// in the queue.
	ok := e.run(ep, `{}`)
	e.clock.Advance(3 * time.Second)
	if r := e.workerCall("GET", "/v2/"+ep+"/job-take/w1"+q, tok, ""); r.status != 200 {
		t.Fatalf("take = %d %s", r.status, r.body)
	}
	e.clock.Advance(2 * time.Second)
	if r := e.workerCall("POST", "/v2/"+ep+"/job-done/w1/"+ok+q, tok, `{"output":1}`); r.status != 200 {
		t.Fatalf("done = %d %s", r.status, r.body)
	}
	bad := e.run(ep, `{}`)
	e.workerCall("GET", "/v2/"+ep+"/job-take/w1"+q, tok, "")
	if r := e.workerCall("POST", "/v2/"+ep+"/job-done/w1/"+bad+q, tok, `{"error":"boom"}`); r.status != 200 {
		t.Fatalf("error done = %d %s", r.status, r.body)
	}
	gone := e.run(ep, `{}`)
	if r := e.as(e.alice, "POST", "/v2/"+ep+"/cancel/"+gone, ""); r.status != 200 {
		t.Fatalf("cancel = %d %s", r.status, r.body)
	}
	if err := e.engine.FlushHistory(context.Background()); err != nil {
		t.Fatalf("FlushHistory = %v", err)
	}

	r := e.as(e.alice, "GET", "/v2/"+ep+"/metrics", "")
	if r.status != 200 {
		t.Fatalf("GET metrics = %d %s; want 200", r.status, r.body)
	}
	m := r.json(t)
	buckets := m["buckets"].([]any)
	if m["range"] != "1h" || m["stepSeconds"] != 60.0 || len(buckets) != 60 {
		t.Fatalf("range %v, step %v, %d buckets; want 1h, 60, 60", m["range"], m["stepSeconds"], len(buckets))
	}
	last := buckets[59].(map[string]any)
	if start, _ := time.Parse(time.RFC3339, last["start"].(string)); !start.Equal(e.clock.Now().Truncate(time.Minute)) {
		t.Errorf("last bucket starts %v; want the current minute %v", last["start"], e.clock.Now().Truncate(time.Minute))
	}
	for k, want := range map[string]float64{"completed": 1, "failed": 1, "cancelled": 1, "timedOut": 0} {
		if last[k] != want {
			t.Errorf("last bucket %s = %v; want %v", k, last[k], want)
		}
	}
	exec := last["execution"].(map[string]any)
	if exec["count"] != 2.0 || exec["meanMs"] != 1000.0 || exec["p90Ms"].(float64) < 1000 || exec["p90Ms"].(float64) > 2000 {
		t.Errorf("execution = %v; want 2 jobs, mean 1000 ms, p90 within the 1-2 s bin", exec)
	}
	if delay := last["delay"].(map[string]any); delay["count"] != 2.0 || delay["meanMs"] != 1500.0 {
		t.Errorf("delay = %v; want 2 jobs, mean 1500 ms", delay)
	}
	if first := buckets[0].(map[string]any); first["completed"] != 0.0 || first["execution"].(map[string]any)["count"] != 0.0 {
		t.Errorf("first bucket = %v; want empty", first)
	}

	day := e.as(e.alice, "GET", "/v2/"+ep+"/metrics?range=24h", "")
	if m := day.json(t); day.status != 200 || m["stepSeconds"] != 900.0 || len(m["buckets"].([]any)) != 96 {
		t.Errorf("range=24h = %d, step %v, %d buckets; want 200, 900, 96", day.status, m["stepSeconds"], len(m["buckets"].([]any)))
	} else if last := m["buckets"].([]any)[95].(map[string]any); last["completed"] != 1.0 {
		t.Errorf("range=24h last bucket completed = %v; want 1", last["completed"])
	}

	for _, tc := range []struct {
		name, key, path string
		status          int
		detail          string
	}{
		{"another user's endpoint", e.bob, "/v2/" + ep + "/metrics", 404, ""},
		{"a key for other endpoints", e.jobs, "/v2/" + ep + "/metrics", 403, ""},
		{"a bad range", e.alice, "/v2/" + ep + "/metrics?range=2h", 422, `query.range: must be 1h or 24h, not "2h"`},
		{"a bad range on another user's endpoint", e.bob, "/v2/" + ep + "/metrics?range=2h", 404, ""},
	} {
		r := e.as(tc.key, "GET", tc.path, "")
		if r.status != tc.status || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s %s; want %d problem+json", tc.name, r.status, r.header.Get("Content-Type"), r.body, tc.status)
		}
		if tc.detail != "" && r.json(t)["detail"] != tc.detail {
			t.Errorf("%s: body %s; want it to say %q", tc.name, r.body, tc.detail)
		}
	}
}
