package api_test

import (
	"strings"
	"testing"

	"github.com/gantryhq/gantry/core"
)

// TestWorkerTokenRevokedOrExpired checks what a worker sees when its token stops being valid:
// 401 problem+json saying why, on every worker route, before its body is read.
func TestWorkerTokenRevokedOrExpired(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := e.create(minimalQueue)
	q := "?gpu=CPU&job_in_progress=0"
	stopped := e.engine.RegisterWorker(ep, "w1")
	e.engine.ForgetWorker(t.Context(), "w1")
	live := e.engine.RegisterWorker(ep, "w2")

	check := func(name, url, token, wantDetail string) {
		t.Helper()
		r := e.workerCall("POST", url, token, `{"output":1}`)
		if r.status != 401 || r.header.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(r.json(t)["detail"].(string), wantDetail) {
			t.Errorf("%s: %d %s %s; want 401 problem+json saying %q", name, r.status, r.header.Get("Content-Type"), r.body, wantDetail)
		}
	}
	check("stopped worker's job-done", "/v2/"+ep+"/job-done/w1/j1"+q, stopped, "revoked")
	if r := e.workerCall("GET", "/v2/"+ep+"/ping/w2"+q, live, ""); r.status != 200 {
		t.Fatalf("live worker's ping = %d %s; want 200", r.status, r.body)
	}

	e.clock.Set(t0.Add(core.WorkerTokenLife))
	check("expired token's job-done", "/v2/"+ep+"/job-done/w2/j1"+q, live, "expired")
}
