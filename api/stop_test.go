package api_test

import (
	"fmt"
	"testing"
	"time"
)

// A worker that behaves as the runpod SDK does when a job is cancelled right after it took it:
// it ignores the first stop (its task has not started) and keeps listing the job in its pings.
// job-stop names the job again until a ping no longer lists it.
func TestJobStopRepeatsWhileThePingListsTheJob(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := e.create(minimalQueue)
	tok := e.engine.RegisterWorker(ep, "w1")
	q := "?gpu=CPU"
	id := e.run(ep, `{}`)
	if r := e.workerCall("GET", "/v2/"+ep+"/job-take/w1"+q+"&job_in_progress=0", tok, ""); r.status != 200 {
		t.Fatalf("take = %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v2/"+ep+"/cancel/"+id, e.alice, ""); r.status != 200 {
		t.Fatalf("cancel = %d %s", r.status, r.body)
	}
	want := fmt.Sprintf(`{"jobsToStop":[%q]}`, id)
	stop := func(step, want string, status int) {
		t.Helper()
		if r := e.workerCall("GET", "/v2/"+ep+"/job-stop/w1"+q, tok, ""); r.status != status || r.body != want {
			t.Errorf("%s: job-stop = %d %s; want %d %s", step, r.status, r.body, status, want)
		}
	}
	stop("first", want, 200) // ignored by the worker
	ping := func(jobs string) {
		t.Helper()
		e.clock.Set(e.clock.Now().Add(2 * time.Second))
		if r := e.workerCall("GET", "/v2/"+ep+"/ping/w1"+q+jobs+"&runpod_version=1.12.0", tok, ""); r.status != 200 {
			t.Fatalf("ping = %d %s", r.status, r.body)
		}
	}
	ping("&job_id=" + id)
	stop("while the ping lists the job", want, 200)
	if h := e.do("GET", "/v2/"+ep+"/health", e.alice, "").json(t); fmt.Sprint(h["workers"]) != "map[idle:0 initializing:0 running:1 suspended:0 throttled:0 unhealthy:0]" {
		t.Errorf("health workers = %v; want the worker running", h["workers"])
	}
	ping("")
	stop("after a ping without the job", "", 204)
	if h := e.do("GET", "/v2/"+ep+"/health", e.alice, "").json(t); fmt.Sprint(h["workers"]) != "map[idle:1 initializing:0 running:0 suspended:0 throttled:0 unhealthy:0]" {
		t.Errorf("health workers = %v; want the worker idle", h["workers"])
	}
}
