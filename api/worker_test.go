package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// workerCall sends a worker-protocol request as the RunPod SDK does: bare token, JSON body
// with a form Content-Type.
func (e *env) workerCall(method, url, token, body string) response {
	e.t.Helper()
	ctype := ""
	if body != "" {
		ctype = "application/x-www-form-urlencoded"
	}
	return e.doRaw(method, url, token, ctype, body)
}

func (e *env) run(ep, input string) string {
	e.t.Helper()
	r := e.do("POST", "/v2/"+ep+"/run", e.alice, `{"input":`+input+`}`)
	if r.status != 200 {
		e.t.Fatalf("run = %d %s", r.status, r.body)
	}
	return r.json(e.t)["id"].(string)
}

func (e *env) jobStatus(ep, id string) map[string]any {
	e.t.Helper()
	return e.do("GET", "/v2/"+ep+"/status/"+id, e.alice, "").json(e.t)
}

func TestWorkerProtocol(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := e.create(minimalQueue)
	other := e.create(minimalQueue)
	tok := e.engine.RegisterWorker(ep, "w1")
	tok2 := e.engine.RegisterWorker(ep, "w2")
	q := "?gpu=CPU&job_in_progress=0"

	// Auth: bare token of this worker of this endpoint only.
	for _, tc := range []struct {
		name, url, token string
		status           int
	}{
		{"unknown token", "/v2/" + ep + "/ping/w1" + q, "gw_nope", 401},
		{"no token", "/v2/" + ep + "/ping/w1" + q, "", 401},
		{"another worker's id", "/v2/" + ep + "/ping/w2" + q, tok, 403},
		{"another endpoint", "/v2/" + other + "/ping/w1" + q, tok, 403},
		{"user key", "/v2/" + ep + "/ping/w1" + q, e.alice, 401},
		{"ok", "/v2/" + ep + "/ping/w1" + q + "&job_id=a,b&runpod_version=1.7.0", tok, 200},
	} {
		if r := e.workerCall("GET", tc.url, tc.token, ""); r.status != tc.status {
			t.Errorf("%s: %d %s; want %d", tc.name, r.status, r.body, tc.status)
		}
	}

	// A worker failing its startup checks shows as unhealthy in /health.
	tok3 := e.engine.RegisterWorker(ep, "w3")
	if r := e.workerCall("GET", "/v2/"+ep+"/ping/w3"+q+"&status=unhealthy&check=cuda&reason=no+GPU", tok3, ""); r.status != 200 {
		t.Fatalf("unhealthy ping = %d", r.status)
	}
	if h := e.do("GET", "/v2/"+ep+"/health", e.alice, "").json(t); fmt.Sprint(h["workers"]) != "map[idle:0 initializing:2 running:0 suspended:0 throttled:0 unhealthy:1]" {
		t.Errorf("health workers = %v; want w1 and w2 initializing, w3 unhealthy", h["workers"])
	}

	// Nothing queued: 204 after the long poll.
	if r := e.workerCall("GET", "/v2/"+ep+"/job-take/w1"+q, tok, ""); r.status != 204 {
		t.Errorf("empty take = %d; want 204", r.status)
	}
	id := e.run(ep, `{"z":1,"a":[1,2]}`)
	r := e.workerCall("GET", "/v2/"+ep+"/job-take/w1"+q, tok, "")
	if r.status != 200 || r.body != fmt.Sprintf(`{"id":%q,"input":{"z":1,"a":[1,2]}}`, id) {
		t.Fatalf("take = %d %s", r.status, r.body)
	}
	if st := e.jobStatus(ep, id); st["status"] != "IN_PROGRESS" || st["workerId"] != "w1" {
		t.Errorf("after take: %v", st)
	}
	done := "/v2/" + ep + "/job-done/w1/" + id + q + "&isStream=false"
	// Progress, then a foreign done (refused, nothing changes), then the result.
	if r := e.workerCall("POST", done, tok, `{"status":"IN_PROGRESS","output":{"pct":50}}`); r.status != 200 {
		t.Fatalf("progress = %d %s", r.status, r.body)
	}
	if st := e.jobStatus(ep, id); st["status"] != "IN_PROGRESS" || fmt.Sprint(st["output"]) != "map[pct:50]" {
		t.Errorf("after progress: %v", st)
	}
	if r := e.workerCall("POST", "/v2/"+ep+"/job-done/w2/"+id+q, tok2, `{"output":"stolen"}`); r.status != 409 {
		t.Errorf("done by a worker that does not hold the job = %d %s; want 409", r.status, r.body)
	}
	if r := e.workerCall("POST", done, tok, `{"output":{"ok":true}}`); r.status != 200 || r.body != `{"status":"ok"}` {
		t.Fatalf("done = %d %s", r.status, r.body)
	}
	if st := e.jobStatus(ep, id); st["status"] != "COMPLETED" || fmt.Sprint(st["output"]) != "map[ok:true]" {
		t.Errorf("after done: %v", st)
	}
	if r := e.workerCall("POST", done, tok, `{"status":"IN_PROGRESS","output":"late"}`); r.status != 409 {
		t.Errorf("late progress = %d; want 409", r.status)
	}
	if st := e.jobStatus(ep, id); fmt.Sprint(st["output"]) != "map[ok:true]" {
		t.Errorf("a late progress changed the output: %v", st)
	}

	// The runpod SDK reports errors as a JSON string.
	id = e.run(ep, `{}`)
	e.workerCall("GET", "/v2/"+ep+"/job-take/w1"+q, tok, "")
	sdkErr := `{"error":"{\"error_type\": \"<class 'ValueError'>\", \"error_message\": \"bad input\"}"}`
	if r := e.workerCall("POST", "/v2/"+ep+"/job-done/w1/"+id+q, tok, sdkErr); r.status != 200 {
		t.Fatalf("error done = %d %s", r.status, r.body)
	}
	if st := e.jobStatus(ep, id); st["status"] != "FAILED" || !strings.Contains(fmt.Sprint(st["error"]), "bad input") {
		t.Errorf("after an error: %v", st)
	}

	// Stream parts reach /stream.
	id = e.run(ep, `{}`)
	e.workerCall("GET", "/v2/"+ep+"/job-take/w1"+q, tok, "")
	for _, part := range []string{`{"output":"a"}`, `{"output":{"text":["b"]}}`} {
		if r := e.workerCall("POST", "/v2/"+ep+"/job-stream/w1/"+id+q+"&isStream=false", tok, part); r.status != 200 {
			t.Fatalf("stream = %d %s", r.status, r.body)
		}
	}
	if r := e.do("GET", "/v2/"+ep+"/stream/"+id, e.alice, ""); r.body != `{"status":"IN_PROGRESS","stream":[{"output":"a"},{"output":{"text":["b"]}}]}` {
		t.Errorf("stream = %s", r.body)
	}

	// Cancel: job-stop names the job; without anything to stop it is 204.
	if r := e.do("POST", "/v2/"+ep+"/cancel/"+id, e.alice, ""); r.status != 200 {
		t.Fatalf("cancel = %d", r.status)
	}
	if r := e.workerCall("GET", "/v2/"+ep+"/job-stop/w1"+q, tok, ""); r.status != 200 || r.body != fmt.Sprintf(`{"jobsToStop":[%q]}`, id) {
		t.Errorf("job-stop = %d %s", r.status, r.body)
	}
	// The job stays named until the worker's ping no longer lists it (stop_test.go).
	e.clock.Set(e.clock.Now().Add(2 * time.Second))
	if r := e.workerCall("GET", "/v2/"+ep+"/ping/w1"+q, tok, ""); r.status != 200 {
		t.Fatalf("ping = %d", r.status)
	}
	if r := e.workerCall("GET", "/v2/"+ep+"/job-stop/w1"+q, tok, ""); r.status != 204 {
		t.Errorf("job-stop with nothing = %d; want 204", r.status)
	}

	// Batch take.
	for range 3 {
		e.run(ep, `{}`)
	}
	r = e.workerCall("GET", "/v2/"+ep+"/job-take-batch/w2"+q+"&batch_size=5", tok2, "")
	var batch []map[string]any
	if json.Unmarshal([]byte(r.body), &batch); r.status != 200 || len(batch) != 3 {
		t.Errorf("batch take = %d %s; want 3 jobs", r.status, r.body)
	}
}

// TestOversizedResults: a result too large fails the job with a clear error instead of
// vanishing, whether it is over the 20 MB result limit or over the 64 MB body cap.
func TestOversizedResults(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := e.create(minimalQueue)
	tok := e.engine.RegisterWorker(ep, "w1")
	for _, size := range []int{21 << 20, 65 << 20} {
		id := e.run(ep, `{}`)
		e.workerCall("GET", "/v2/"+ep+"/job-take/w1?gpu=CPU", tok, "")
		body := `{"output":"` + strings.Repeat("x", size) + `"}`
		r := e.workerCall("POST", "/v2/"+ep+"/job-done/w1/"+id+"?gpu=CPU", tok, body)
		st := e.jobStatus(ep, id)
		if st["status"] != "FAILED" || !strings.Contains(fmt.Sprint(st["error"]), "over the 20 MB limit") {
			t.Errorf("%d MB result: post %d, job %v; want FAILED with the size named", size>>20, r.status, st["error"])
		}
	}
}
