package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// modelEnv is an API serving the built-in ready-made models, with alice's and bob's keys.
func modelEnv(t *testing.T) *env {
	t.Helper()
	return setup(t, setupOpts{quota: core.Quota{Minute: 1000, Hour: 10000, Day: 100000}, models: true})
}

// takeModelJob takes the next job of a model endpoint as worker id and returns the job id and the
// worker's token.
func (e *env) takeModelJob(model, worker string) (string, string) {
	e.t.Helper()
	tok := e.engine.RegisterWorker(model, worker)
	r := e.workerCall("GET", "/v2/"+model+"/job-take/"+worker+"?gpu=CPU", tok, "")
	if r.status != 200 {
		e.t.Fatalf("take = %d %s", r.status, r.body)
	}
	return r.json(e.t)["id"].(string), tok
}

// putFile posts a file to job-file as a worker does and returns the answer.
func (e *env) putFile(model, worker, job, token, ext string, data []byte) response {
	e.t.Helper()
	return e.doRaw("POST", "/v2/"+model+"/job-file/"+worker+"/"+job+"?gpu=CPU&ext="+ext, token, "application/octet-stream", string(data))
}

func pngBytes(t *testing.T, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestListModels(t *testing.T) {
	t.Parallel()
	e := modelEnv(t)
	for _, auth := range []string{e.alice, "Bearer " + e.bob, "Bearer " + e.read, e.jobs} {
		r := e.do("GET", "/v2/models", auth, "")
		if r.status != 200 {
			t.Fatalf("GET /v2/models = %d %s", r.status, r.body)
		}
		var list struct {
			Items []struct {
				ID, Type   string
				Parameters []struct{ Name string }
				Unit       struct{ ID, Description string }
				Price      struct {
					PerUnit       string
					PerUnitMicros int64
				}
			}
		}
		_ = json.Unmarshal([]byte(r.body), &list)
		var got []string
		for _, m := range list.Items {
			got = append(got, fmt.Sprintf("%s %s %s %s/%d", m.ID, m.Type, m.Unit.ID, m.Price.PerUnit, m.Price.PerUnitMicros))
		}
		want := []string{"gantry-image IMAGE_GENERATION megapixel 0.0024/2400", "gantry-video VIDEO_GENERATION 5_seconds 0.1/100000",
			"gantry-tts TEXT_TO_SPEECH 1k_characters 0.015/15000", "gantry-text TEXT_GENERATION 1m_tokens 0.2/200000"}
		if !slices.Equal(got, want) || len(list.Items[0].Parameters) != 3 || list.Items[0].Unit.Description == "" {
			t.Errorf("GET /v2/models = %v; want %v with parameters and unit descriptions", got, want)
		}
	}
}

// TestModelJobMeteredFromTheFile runs an image job through the API with a worker that makes a
// smaller PNG than asked for and claims the asked size: the cost is the file's.
func TestModelJobMeteredFromTheFile(t *testing.T) {
	t.Parallel()
	e := modelEnv(t)
	r := e.do("POST", "/v2/gantry-image/run", e.alice, `{"input":{"prompt":"a cat","width":1024,"height":1024}}`)
	if r.status != 200 {
		t.Fatalf("run = %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	job, tok := e.takeModelJob("gantry-image", "w1")
	if job != id {
		t.Fatalf("took %s; want %s", job, id)
	}
	img := pngBytes(t, 320, 200)

	// job-file refuses: a body that is not the format, another worker, another endpoint's token.
	tok2 := e.engine.RegisterWorker("gantry-image", "w2")
	for _, tc := range []struct {
		name, worker, token, ext string
		body                     []byte
		status                   int
	}{
		{"not a PNG", "w1", tok, "png", []byte("GIF89a......"), 422},
		{"unknown format", "w1", tok, "jpg", img, 422},
		{"a worker that does not hold the job", "w2", tok2, "png", img, 409},
		{"no token", "w1", "", "png", img, 401},
	} {
		if r := e.putFile("gantry-image", tc.worker, id, tc.token, tc.ext, tc.body); r.status != tc.status {
			t.Errorf("job-file, %s = %d %s; want %d", tc.name, r.status, r.body, tc.status)
		}
	}
	r = e.putFile("gantry-image", "w1", id, tok, "png", img)
	if r.status != 200 {
		t.Fatalf("job-file = %d %s", r.status, r.body)
	}
	stored := r.json(t)
	url := stored["url"].(string)
	if !strings.HasPrefix(url, "https://gantry.example/files/"+id+"-") || stored["contentType"] != "image/png" || stored["bytes"] != float64(len(img)) {
		t.Errorf("job-file = %v", stored)
	}
	done := fmt.Sprintf(`{"output":{"image_url":%q,"width":1024,"height":1024}}`, url)
	if r := e.workerCall("POST", "/v2/gantry-image/job-done/w1/"+id+"?gpu=CPU", tok, done); r.status != 200 {
		t.Fatalf("job-done = %d %s", r.status, r.body)
	}

	st := e.do("GET", "/v2/gantry-image/status/"+id, e.alice, "").json(t)
	cost, _ := json.Marshal(st["cost"])
	want := `{"cost":"0.000154","costMicros":154,"currency":"USD","measure":"pixels","model":"gantry-image","quantity":64000,"unit":"megapixel","unitPrice":"0.0024","units":"0.064"}`
	if st["status"] != "COMPLETED" || string(cost) != want {
		t.Errorf("status = %v; cost %s; want COMPLETED costing %s", st["status"], cost, want)
	}
	// The file at its signed URL, no key; a changed signature is refused.
	path := strings.TrimPrefix(url, "https://gantry.example")
	if r := e.do("GET", path, "", ""); r.status != 200 || r.header.Get("Content-Type") != "image/png" || r.body != string(img) {
		t.Errorf("GET %s = %d %s (%d bytes); want the PNG", path, r.status, r.header.Get("Content-Type"), len(r.body))
	}
	if r := e.do("GET", path[:len(path)-2]+"xx", "", ""); r.status != 403 || r.header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("GET with a changed signature = %d %s; want 403 problem+json", r.status, r.body)
	}
	e.clock.Set(t0.Add(2 * time.Hour))
	if r := e.do("GET", path, "", ""); r.status != 403 || !strings.Contains(r.body, "expired") {
		t.Errorf("GET after expiry = %d %s; want 403, expired", r.status, r.body)
	}
	e.clock.Set(t0)

	// Usage: alice's one record; bob's none.
	u := e.as(e.alice, "GET", "/v2/billing/usage", "").json(t)
	items, _ := u["items"].([]any)
	if len(items) != 1 || u["costMicros"] != 154.0 || items[0].(map[string]any)["jobId"] != id {
		t.Errorf("alice's usage = %v; want the one job", u)
	}
	if u := e.as(e.bob, "GET", "/v2/billing/usage", "").json(t); len(u["items"].([]any)) != 0 || u["costMicros"] != 0.0 {
		t.Errorf("bob's usage = %v; want none", u)
	}
}

// TestModelJobsAreTheCallers: users share a model's endpoint but see only their own jobs, and
// cannot manage the endpoint.
func TestModelJobsAreTheCallers(t *testing.T) {
	t.Parallel()
	e := modelEnv(t)
	run := func(key string) string {
		r := e.do("POST", "/v2/gantry-text/run", key, `{"input":{"prompt":"a b c"}}`)
		if r.status != 200 {
			t.Fatalf("run = %d %s", r.status, r.body)
		}
		return r.json(t)["id"].(string)
	}
	a1, a2, b1 := run(e.alice), run(e.alice), run(e.bob)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/v2/gantry-text/status/" + b1}, {"POST", "/v2/gantry-text/status/" + b1},
		{"GET", "/v2/gantry-text/status-sync/" + b1 + "?wait=1000"}, {"GET", "/v2/gantry-text/stream/" + b1},
		{"POST", "/v2/gantry-text/cancel/" + b1}, {"POST", "/v2/gantry-text/retry/" + b1},
	} {
		if r := e.do(tc.method, tc.path, e.alice, ""); r.status != 404 {
			t.Errorf("alice %s %s (bob's job) = %d %s; want 404", tc.method, tc.path, r.status, r.body)
		}
	}
	if r := e.do("GET", "/v2/gantry-text/status/"+b1, e.bob, ""); r.status != 200 {
		t.Errorf("bob's own status = %d", r.status)
	}
	if r := e.do("GET", "/v2/gantry-text/health", e.bob, ""); r.status != 200 || !strings.Contains(r.body, `"inQueue":3`) {
		t.Errorf("health = %d %s; want every user's counts", r.status, r.body)
	}
	// purge-queue cancels only the caller's queued jobs.
	if r := e.do("POST", "/v2/gantry-text/purge-queue", e.alice, ""); r.status != 200 || r.json(t)["removed"] != 2.0 {
		t.Errorf("alice's purge = %d %s; want 2 removed", r.status, r.body)
	}
	for id, want := range map[string]string{a1: "CANCELLED", a2: "CANCELLED"} {
		if st := e.jobStatus("gantry-text", id); st["status"] != want {
			t.Errorf("alice's job after her purge: %v", st["status"])
		}
	}
	if st := e.do("GET", "/v2/gantry-text/status/"+b1, e.bob, "").json(t); st["status"] != "IN_QUEUE" {
		t.Errorf("bob's job after alice's purge: %v; want IN_QUEUE", st["status"])
	}
	// The platform endpoint is nobody's to manage.
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/v2/serverless/gantry-text", ""}, {"PATCH", "/v2/serverless/gantry-text", `{"name":"mine"}`},
		{"DELETE", "/v2/serverless/gantry-text", ""},
	} {
		if r := e.as(e.alice, tc.method, tc.path, tc.body); r.status != 404 {
			t.Errorf("%s %s = %d; want 404", tc.method, tc.path, r.status)
		}
	}
	if r := e.as(e.alice, "GET", "/v2/serverless", ""); r.body != `{"items":[]}` {
		t.Errorf("alice's endpoints = %s; want none", r.body)
	}
	// A jobs key limited to other endpoints may not run models; one that names the model may.
	if r := e.do("POST", "/v2/gantry-text/run", e.jobs, `{"input":{"prompt":"x"}}`); r.status != 403 {
		t.Errorf("run with a key for ep-allowed only = %d; want 403", r.status)
	}
	k := e.newKey("carol", "jobs", []string{"gantry-text"}, nil)
	if r := e.do("POST", "/v2/gantry-text/run", k, `{"input":{"prompt":"x"}}`); r.status != 200 {
		t.Errorf("run with a key for gantry-text = %d %s; want 200", r.status, r.body)
	}
}

// TestModelJobsNotCompletedChargeNothing: failed, unmeasurable and cancelled model jobs leave
// the ledger empty and carry no cost.
func TestModelJobsNotCompletedChargeNothing(t *testing.T) {
	t.Parallel()
	e := modelEnv(t)
	ids := map[string]string{}
	for _, how := range []string{"failed", "unmeasurable", "cancelled"} {
		r := e.do("POST", "/v2/gantry-image/run", e.alice, `{"input":{"prompt":"`+how+`"}}`)
		ids[how] = r.json(t)["id"].(string)
		job, tok := e.takeModelJob("gantry-image", "w-"+how)
		switch how {
		case "failed":
			e.workerCall("POST", "/v2/gantry-image/job-done/w-failed/"+job+"?gpu=CPU", tok, `{"error":"out of memory"}`)
		case "unmeasurable": // names a file it never stored
			e.workerCall("POST", "/v2/gantry-image/job-done/w-unmeasurable/"+job+"?gpu=CPU", tok,
				`{"output":{"image_url":"https://gantry.example/files/`+job+`-aaaaaaaaaa.png?expires=1&sig=x","width":512,"height":512}}`)
		case "cancelled":
			e.do("POST", "/v2/gantry-image/cancel/"+job, e.alice, "")
			e.putFile("gantry-image", "w-cancelled", job, tok, "png", pngBytes(t, 64, 64))
			e.workerCall("POST", "/v2/gantry-image/job-done/w-cancelled/"+job+"?gpu=CPU", tok, `{"output":{}}`)
		}
	}
	for how, want := range map[string]string{"failed": "FAILED", "unmeasurable": "FAILED", "cancelled": "CANCELLED"} {
		st := e.jobStatus("gantry-image", ids[how])
		if st["status"] != want || st["cost"] != nil {
			t.Errorf("%s job: %v; want %s with no cost", how, st, want)
		}
		if how == "unmeasurable" && !strings.Contains(fmt.Sprint(st["error"]), "nothing is charged") {
			t.Errorf("unmeasurable job's error = %v; want it to say nothing is charged", st["error"])
		}
	}
	if u := e.as(e.alice, "GET", "/v2/billing/usage", "").json(t); len(u["items"].([]any)) != 0 {
		t.Errorf("usage = %v; want nothing charged", u)
	}
}

func TestModelInputChecked(t *testing.T) {
	t.Parallel()
	e := modelEnv(t)
	tests := []struct {
		model, input string
		want         []string
	}{
		{"gantry-image", `{"prompt":"x","width":100,"steps":30}`, []string{
			"$.input.steps: unknown parameter of model gantry-image (see GET /v2/models)", "$.input.width: must be a multiple of 8 (got 100)"}},
		{"gantry-image", `{"width":512}`, []string{"$.input.prompt: is required"}},
		{"gantry-tts", `{"text":"hi","speed":9000}`, []string{"$.input.speed: must be at most 450 (got 9000)"}},
		{"gantry-video", `{"prompt":"x","frames":0}`, []string{"$.input.frames: must be at least 1 (got 0)"}},
		{"gantry-text", `{"prompt":"x","max_tokens":"ten"}`, []string{"$.input.max_tokens: must be an integer"}},
	}
	for _, tt := range tests {
		r := e.do("POST", "/v2/"+tt.model+"/runsync", e.alice, `{"input":`+tt.input+`}`)
		if got := r.errors(t); r.status != 422 || !slices.Equal(got, tt.want) {
			t.Errorf("%s %s = %d %v; want 422 %v", tt.model, tt.input, r.status, got, tt.want)
		}
	}
}

func TestUsageParameters(t *testing.T) {
	t.Parallel()
	e := modelEnv(t)
	tests := []struct {
		query  string
		status int
		errors []string
	}{
		{"?model=gantry-image&from=2026-11-01&to=2026-11-30", 200, nil},
		{"?from=2026-11-21T10:00:00Z&limit=5", 200, nil},
		{"?model=nope&from=yesterday", 422, []string{
			`query.from: "yesterday" is neither an RFC 3339 date-time (2026-11-21T10:00:00Z) nor a date (2026-11-21)`,
			"query.model: unknown model \"nope\" (models: gantry-image, gantry-video, gantry-tts, gantry-text)"}},
		{"?from=2026-11-02&to=2026-11-01", 422, []string{"query.to: must be after from"}},
		{"?limit=0", 422, []string{"query.limit: must be at least 1 (got 0)"}},
		{"?limit=abc", 400, []string{"query.limit: cannot be parsed"}},
		{"?cursor=zzz", 422, []string{`query.cursor: "zzz" is not a cursor this report returned`}},
	}
	for _, tt := range tests {
		r := e.as(e.alice, "GET", "/v2/billing/usage"+tt.query, "")
		if r.status != tt.status || (tt.errors != nil && !slices.Equal(r.errors(t), tt.errors)) {
			t.Errorf("GET usage%s = %d %s; want %d %v", tt.query, r.status, r.body, tt.status, tt.errors)
		}
		if r.status != 200 && r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET usage%s: Content-Type %q; want problem+json", tt.query, r.header.Get("Content-Type"))
		}
	}
	if r := e.as(e.jobs, "GET", "/v2/billing/usage", ""); r.status != http.StatusForbidden {
		t.Errorf("usage with a jobs-only key = %d; want 403", r.status)
	}
	if r := e.as(e.read, "GET", "/v2/billing/usage", ""); r.status != 200 {
		t.Errorf("usage with a read key = %d; want 200", r.status)
	}
}
