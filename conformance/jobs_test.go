package conformance

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

type job struct {
	ID            string          `json:"id"`
	Status        string          `json:"status"`
	Output        json.RawMessage `json:"output"`
	Error         string          `json:"error"`
	DelayTime     *int64          `json:"delayTime"`
	ExecutionTime *int64          `json:"executionTime"`
	Stream        []struct {
		Output json.RawMessage `json:"output"`
	} `json:"stream"`
}

func jobCall(t *testing.T, method, path, body string) (int, job) {
	t.Helper()
	r := do(t, method, path, gantry.key, body) // job operations take the bare key too
	var j job
	_ = json.Unmarshal(r.body, &j)
	return r.status, j
}

func waitJob(t *testing.T, ep, id, want string) job {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, j := jobCall(t, "GET", "/v2/"+ep+"/status/"+id, "")
		if code == 200 && j.Status == want {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: %d %+v; want %s", id, code, j, want)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// TestJobLifeCycle runs jobs on gantry/echo workers that the Docker pool starts as containers.
func TestJobLifeCycle(t *testing.T) {
	t.Parallel()
	ep := create(t, echoEndpoint("conformance-jobs", `,"workers":{"min":0,"max":2,"idleTimeout":30}`))["id"].(string)
	code, j := jobCall(t, "POST", "/v2/"+ep+"/runsync", `{"input":{"echo":{"hello":"docker"}}}`)
	if code != 200 || j.Status != "COMPLETED" || string(j.Output) != `{"hello":"docker"}` || j.DelayTime == nil || j.ExecutionTime == nil {
		t.Fatalf("runsync = %d %+v %s", code, j, j.Output)
	}
	r := do(t, "GET", "/v2/serverless/"+ep+"/workers", "Bearer "+gantry.key, "")
	if !strings.Contains(string(r.body), `"pool":"`+poolID+`"`) {
		t.Errorf("workers = %s; want a worker on the %s pool", r.body, poolID)
	}

	code, j = jobCall(t, "POST", "/v2/"+ep+"/run", `{"input":{"echo":42}}`)
	if code != 200 || j.Status != "IN_QUEUE" || j.ID == "" {
		t.Fatalf("run = %d %+v", code, j)
	}
	if got := waitJob(t, ep, j.ID, "COMPLETED"); string(got.Output) != "42" {
		t.Errorf("run output %s; want 42", got.Output)
	}
	if code, _ := jobCall(t, "POST", "/v2/"+ep+"/status/"+j.ID, ""); code != 200 {
		t.Errorf("POST status = %d; want 200 (GET and POST both work)", code)
	}

	// stream: parts handed out once, then the aggregate
	_, s := jobCall(t, "POST", "/v2/"+ep+"/run", `{"input":{"stream":["a","b","c"]}}`)
	var parts []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		_, st := jobCall(t, "GET", "/v2/"+ep+"/stream/"+s.ID, "")
		for _, c := range st.Stream {
			parts = append(parts, string(c.Output))
		}
		if st.Status == "COMPLETED" {
			break
		}
	}
	if strings.Join(parts, "") != `"a""b""c"` {
		t.Errorf("streamed %v; want a, b, c once each", parts)
	}

	// cancel a running job; retry a failed one; the wrong state is 409
	_, slow := jobCall(t, "POST", "/v2/"+ep+"/run", `{"input":{"sleep_ms":60000}}`)
	waitJob(t, ep, slow.ID, "IN_PROGRESS")
	if code, c := jobCall(t, "POST", "/v2/"+ep+"/cancel/"+slow.ID, ""); code != 200 || c.Status != "CANCELLED" {
		t.Errorf("cancel = %d %+v", code, c)
	}
	if r := do(t, "POST", "/v2/"+ep+"/cancel/"+slow.ID, gantry.key, ""); r.status != 409 {
		t.Errorf("second cancel = %d; want 409", r.status)
	}
	_, bad := jobCall(t, "POST", "/v2/"+ep+"/run", `{"input":{"error":"boom"}}`)
	if f := waitJob(t, ep, bad.ID, "FAILED"); !strings.Contains(f.Error, "boom") {
		t.Errorf("failed job error %q; want boom", f.Error)
	}
	if code, rj := jobCall(t, "POST", "/v2/"+ep+"/retry/"+bad.ID, ""); code != 200 || rj.Status != "IN_QUEUE" {
		t.Errorf("retry = %d %+v", code, rj)
	}
	waitJob(t, ep, bad.ID, "FAILED")

	// health
	r = do(t, "GET", "/v2/"+ep+"/health", gantry.key, "")
	var h struct {
		Jobs    map[string]int `json:"jobs"`
		Workers map[string]int `json:"workers"`
	}
	_ = json.Unmarshal(r.body, &h)
	if r.status != 200 || h.Jobs["completed"] < 3 || h.Jobs["failed"] < 1 || h.Jobs["retried"] != 1 {
		t.Errorf("health = %d %s", r.status, r.body)
	}
}

// TestPurgeQueue fills the queue of a one-worker endpoint and purges it.
func TestPurgeQueue(t *testing.T) {
	t.Parallel()
	ep := create(t, echoEndpoint("conformance-purge", `,"workers":{"min":0,"max":1,"idleTimeout":30}`))["id"].(string)
	_, slow := jobCall(t, "POST", "/v2/"+ep+"/run", `{"input":{"sleep_ms":60000}}`)
	waitJob(t, ep, slow.ID, "IN_PROGRESS")
	var queued []string
	for range 4 {
		_, j := jobCall(t, "POST", "/v2/"+ep+"/run", `{"input":{"echo":1}}`)
		queued = append(queued, j.ID)
	}
	r := do(t, "POST", "/v2/"+ep+"/purge-queue", gantry.key, "")
	if r.status != 200 || !strings.Contains(string(r.body), `"removed":4`) {
		t.Errorf("purge-queue = %d %s; want 4 removed", r.status, r.body)
	}
	for _, id := range queued {
		if _, j := jobCall(t, "GET", "/v2/"+ep+"/status/"+id, ""); j.Status != "CANCELLED" {
			t.Errorf("purged job %s is %s; want CANCELLED", id, j.Status)
		}
	}
	jobCall(t, "POST", "/v2/"+ep+"/cancel/"+slow.ID, "")
}
