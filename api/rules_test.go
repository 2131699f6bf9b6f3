package api_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"testing"
)

// with returns minimalQueue with top-level fields replaced by those of patch and the named
// fields removed.
func with(patch string, drop ...string) string {
	var base, p map[string]any
	_ = json.Unmarshal([]byte(minimalQueue), &base)
	if err := json.Unmarshal([]byte(patch), &p); err != nil {
		panic(patch + ": " + err.Error())
	}
	for k, v := range p {
		base[k] = v
	}
	for _, k := range drop {
		delete(base, k)
	}
	b, _ := json.Marshal(base)
	return string(b)
}

// TestCreateEndpointRules has one row per rule of spec sections 2.2-2.6 and 4.1.
func TestCreateEndpointRules(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tests := []struct {
		name   string
		body   string
		status int
		errors []string // exact errors list for a failure
	}{
		// 4.1 required fields and their minimums.
		{"minimal", minimalQueue, 201, nil},
		{"name missing", with(`{}`, "name"), 422, []string{"$.name: is required"}},
		{"name empty", with(`{"name":""}`), 422, []string{"$.name: must not be empty"}},
		{"type missing", with(`{}`, "type"), 422, []string{"$.type: is required"}},
		{"type unknown", with(`{"type":"BATCH"}`), 422, []string{`$.type: invalid value: BATCH`}},
		{"gpu missing", with(`{}`, "gpu"), 422, []string{"$.gpu: is required"}},
		{"scaling missing", with(`{}`, "scaling"), 422, []string{"$.scaling: is required"}},
		{"image missing", with(`{}`, "image"), 422, []string{"$.image: is required unless templateId is set"}},
		{"image empty", with(`{"image":""}`), 422, []string{"$.image: must not be empty"}},
		{"templateId empty", with(`{"templateId":""}`), 422, []string{"$.templateId: must not be empty"}},
		{"unknown property", with(`{"color":"red"}`), 422, []string{"$.color: unknown property"}},
		{"cpu is read-only", with(`{"cpu":{"id":"x","vcpuCount":2,"memory":1}}`), 422, []string{"$.cpu: unknown property"}},
		{"name wrong type", with(`{"name":5}`), 422, nil},

		// 2.2 gpu.
		{"gpu.pools missing", with(`{"gpu":{}}`), 422, []string{"$.gpu.pools: is required"}},
		{"gpu.pools empty", with(`{"gpu":{"pools":[]}}`), 422, []string{"$.gpu.pools: must not be empty"}},
		{"gpu.pools unknown", with(`{"gpu":{"pools":["a100-eu","nope"]}}`), 422, []string{`$.gpu.pools[1]: unknown pool "nope" (see GET /v2/catalog/gpus)`}},
		{"gpu.pools twice", with(`{"gpu":{"pools":["a100-eu","a100-eu"]}}`), 422, []string{`$.gpu.pools[1]: pool "a100-eu" is listed twice`}},
		{"gpu.count 0", with(`{"gpu":{"pools":["a100-eu"],"count":0}}`), 422, []string{"$.gpu.count: must be at least 1 (got 0)"}},
		{"gpu.count 1", with(`{"gpu":{"pools":["a100-eu"],"count":1}}`), 201, nil},
		{"gpu.count over every pool", with(`{"gpu":{"pools":["a100-eu","h100-us"],"count":5}}`), 422, []string{"$.gpu.count: 5 GPUs per worker is more than any listed pool can give one worker (at most 4)"}},
		{"gpu.count fits one pool", with(`{"gpu":{"pools":["h100-us","a100-eu"],"count":4}}`), 201, nil},
		{"gpu extra property", with(`{"gpu":{"pools":["a100-eu"],"type":"A100"}}`), 422, []string{"$.gpu.type: unknown property"}},

		// 2.3 workers.
		{"workers.min -1", with(`{"workers":{"min":-1}}`), 422, []string{"$.workers.min: must be at least 0 (got -1)"}},
		{"workers.max -1", with(`{"workers":{"max":-1}}`), 422, []string{"$.workers.max: must be at least 0 (got -1)"}},
		{"workers.min 0 max 0", with(`{"workers":{"min":0,"max":0}}`), 201, nil},
		{"workers.min over max", with(`{"workers":{"min":4}}`), 422, []string{"$.workers.min: must not exceed workers.max (3)"}},
		{"workers.idleTimeout 0", with(`{"workers":{"idleTimeout":0}}`), 422, []string{"$.workers.idleTimeout: must be at least 1 (got 0)"}},
		{"workers.idleTimeout 1", with(`{"workers":{"idleTimeout":1}}`), 201, nil},
		{"workers.idleTimeout 3600", with(`{"workers":{"idleTimeout":3600}}`), 201, nil},
		{"workers.idleTimeout 3601", with(`{"workers":{"idleTimeout":3601}}`), 422, []string{"$.workers.idleTimeout: must be at most 3600 (got 3601)"}},
		{"workers extra property", with(`{"workers":{"min":0,"desired":2}}`), 422, []string{"$.workers.desired: unknown property"}},

		// 2.4 scaling.
		{"scaling type missing", with(`{"scaling":{"queueDelay":4}}`), 422, []string{"$.scaling.type: is required (QUEUE_DELAY or REQUEST_COUNT)"}},
		{"scaling type unknown", with(`{"scaling":{"type":"CPU","queueDelay":4}}`), 422, []string{`$.scaling.type: must be QUEUE_DELAY or REQUEST_COUNT (got "CPU")`}},
		{"queueDelay missing", with(`{"scaling":{"type":"QUEUE_DELAY"}}`), 422, []string{"$.scaling.queueDelay: is required"}},
		{"queueDelay 0.4", with(`{"scaling":{"type":"QUEUE_DELAY","queueDelay":0.4}}`), 422, []string{"$.scaling.queueDelay: must be at least 0.5 (got 0.4)"}},
		{"queueDelay 0.5", with(`{"scaling":{"type":"QUEUE_DELAY","queueDelay":0.5}}`), 201, nil},
		{"queueDelay float", with(`{"scaling":{"type":"QUEUE_DELAY","queueDelay":2.75}}`), 201, nil},
		{"requestCount missing", with(`{"scaling":{"type":"REQUEST_COUNT"}}`), 422, []string{"$.scaling.requestCount: is required"}},
		{"requestCount 0", with(`{"scaling":{"type":"REQUEST_COUNT","requestCount":0}}`), 422, []string{"$.scaling.requestCount: must be at least 1 (got 0)"}},
		{"requestCount 1", with(`{"scaling":{"type":"REQUEST_COUNT","requestCount":1}}`), 201, nil},
		{"requestCount not integer", with(`{"scaling":{"type":"REQUEST_COUNT","requestCount":1.5}}`), 422, nil},
		{"variant extra property", with(`{"scaling":{"type":"REQUEST_COUNT","requestCount":2,"queueDelay":4}}`), 422, []string{"$.scaling.queueDelay: unknown property"}},
		{"QUEUE + REQUEST_COUNT + idleTimeout", with(`{"scaling":{"type":"REQUEST_COUNT","requestCount":2},"workers":{"idleTimeout":30}}`), 422,
			[]string{"$.workers.idleTimeout: does not apply to a QUEUE endpoint scaling on REQUEST_COUNT; omit it"}},
		{"LOAD_BALANCER + QUEUE_DELAY", with(`{"type":"LOAD_BALANCER"}`), 422, []string{"$.scaling.type: must be REQUEST_COUNT for a LOAD_BALANCER endpoint"}},
		{"LOAD_BALANCER + REQUEST_COUNT", with(`{"type":"LOAD_BALANCER","scaling":{"type":"REQUEST_COUNT","requestCount":4}}`), 201, nil},
		{"LOAD_BALANCER + idleTimeout", with(`{"type":"LOAD_BALANCER","scaling":{"type":"REQUEST_COUNT","requestCount":4},"workers":{"idleTimeout":30}}`), 201, nil},

		// 2.5 flashboot.
		{"flashboot OFF", with(`{"flashboot":"OFF"}`), 201, nil},
		{"flashboot FLASHBOOT", with(`{"flashboot":"FLASHBOOT"}`), 201, nil},
		{"flashboot PRIORITY_FLASHBOOT", with(`{"flashboot":"PRIORITY_FLASHBOOT"}`), 201, nil},
		{"flashboot unknown", with(`{"flashboot":"ON"}`), 422, []string{"$.flashboot: invalid value: ON"}},

		// 4.1 container fields.
		{"args", with(`{"args":"python handler.py"}`), 201, nil},
		{"disk 0", with(`{"disk":0}`), 422, []string{"$.disk: must be at least 1 (got 0)"}},
		{"disk 1", with(`{"disk":1}`), 201, nil},
		{"ports ok", with(`{"ports":["8000/http","22/tcp"]}`), 201, nil},
		{"ports bad format", with(`{"ports":["8000"]}`), 422, []string{"$.ports[0]: does not match the pattern ^[0-9]{1,5}/(http|tcp|udp)$"}},
		{"ports out of range", with(`{"ports":["8000/http","70000/tcp"]}`), 422, []string{`$.ports[1]: port "70000" is not between 1 and 65535`}},
		{"env ok", with(`{"env":{"MODEL":"small","_X1":""}}`), 201, nil},
		{"env value not string", with(`{"env":{"N":1}}`), 422, nil},
		{"env bad name", with(`{"env":{"1BAD":"x"}}`), 422, []string{`$.env.1BAD: "1BAD" is not a valid environment variable name`}},
		{"registry string", with(`{"registry":"cred-1"}`), 201, nil},
		{"registry null", with(`{"registry":null}`), 201, nil},
		{"timeout 0", with(`{"timeout":0}`), 422, []string{"$.timeout: must be at least 1 (got 0)"}},
		{"timeout 600000", with(`{"timeout":600000}`), 201, nil},

		// Placement: data centers, network volumes.
		{"dataCenterIds known", with(`{"dataCenterIds":["EU-RO-1"]}`), 201, nil},
		{"dataCenterIds empty", with(`{"dataCenterIds":[]}`), 201, nil},
		{"dataCenterIds unknown", with(`{"dataCenterIds":["EU-RO-1","MARS-1"]}`), 422, []string{`$.dataCenterIds[1]: unknown data center "MARS-1"`}},
		{"dataCenterIds without a listed pool", with(`{"dataCenterIds":["US-TX-3"]}`), 422, []string{"$.dataCenterIds: none of the listed pools is in these data centers"}},
		{"networkVolumes known", with(`{"networkVolumes":["vol-eu"]}`), 201, nil},
		{"networkVolumes unknown", with(`{"networkVolumes":["vol-x"]}`), 422, []string{`$.networkVolumes[0]: unknown network volume "vol-x"`}},
		{"networkVolumes elsewhere", with(`{"gpu":{"pools":["h100-us"]},"networkVolumes":["vol-eu"]}`), 422,
			[]string{`$.networkVolumes[0]: network volume "vol-eu" is in data center "EU-RO-1", where no listed pool is`}},

		// allowedCudaVersions: pattern, exact match against the listed pools' catalog versions.
		{"cuda offered", with(`{"allowedCudaVersions":["12.4","12.6"]}`), 201, nil},
		{"cuda empty", with(`{"allowedCudaVersions":[]}`), 201, nil},
		{"cuda pattern", with(`{"allowedCudaVersions":["12"]}`), 422, []string{`$.allowedCudaVersions[0]: does not match the pattern ^\d+\.\d+$`}},
		{"cuda not exact", with(`{"allowedCudaVersions":["12.40"]}`), 422, []string{"$.allowedCudaVersions[0]: CUDA 12.40 is not offered by the listed pools (offered: 12.4, 12.6)"}},
		{"cuda of an unlisted pool", with(`{"allowedCudaVersions":["12.8"]}`), 422, []string{"$.allowedCudaVersions[0]: CUDA 12.8 is not offered by the listed pools (offered: 12.4, 12.6)"}},
		{"cuda across listed pools", with(`{"gpu":{"pools":["a100-eu","h100-us"]},"allowedCudaVersions":["12.8","12.4"]}`), 201, nil},
		{"cuda on a CPU pool", with(`{"gpu":{"pools":["cpu"]},"allowedCudaVersions":["12.4"]}`), 422, []string{"$.allowedCudaVersions[0]: CUDA 12.4 is not offered: the listed pools have no CUDA"}},

		// Several failures are reported together.
		{"several rule failures", with(`{"gpu":{"pools":["nope"]},"workers":{"min":9},"dataCenterIds":["MARS-1"]}`, "image"), 422, []string{
			"$.image: is required unless templateId is set",
			`$.gpu.pools[0]: unknown pool "nope" (see GET /v2/catalog/gpus)`,
			"$.workers.min: must not exceed workers.max (3)",
			`$.dataCenterIds[0]: unknown data center "MARS-1"`,
		}},
		{"several schema failures", with(`{"gpu":{"pools":["a100-eu"],"count":0},"scaling":{"type":"QUEUE_DELAY","queueDelay":0.1}}`), 422, []string{
			"$.gpu.count: must be at least 1 (got 0)",
			"$.scaling.queueDelay: must be at least 0.5 (got 0.1)",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := e.as(e.alice, "POST", "/v2/serverless", tc.body)
			if r.status != tc.status {
				t.Fatalf("POST %s = %d %s; want %d", tc.body, r.status, r.body, tc.status)
			}
			if tc.status == http.StatusCreated {
				return
			}
			if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type = %q; want application/problem+json", ct)
			}
			got := r.errors(t)
			if len(got) == 0 {
				t.Fatalf("errors = []; want at least one (body %s)", r.body)
			}
			if tc.errors != nil && !reflect.DeepEqual(got, tc.errors) {
				t.Errorf("errors = %q\n want %q", got, tc.errors)
			}
		})
	}
}

// TestCreateEndpointDefaults checks the defaults of 2.3, 4.1 and 8 and the response shape of
// 2.1 and 2.6.
func TestCreateEndpointDefaults(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.as(e.alice, "POST", "/v2/serverless", minimalQueue)
	if r.status != 201 {
		t.Fatalf("create = %d %s", r.status, r.body)
	}
	for _, h := range []string{"RateLimit", "RateLimit-Policy"} {
		if r.header.Get(h) == "" {
			t.Errorf("header %s missing on 201", h)
		}
	}
	m := r.json(t)
	id := m["id"].(string)
	want := map[string]any{
		"name": "ep", "type": "QUEUE", "image": "example/worker:1",
		"gpu":                 map[string]any{"pools": []any{"a100-eu"}, "count": 1.0},
		"workers":             map[string]any{"min": 0.0, "max": 3.0, "idleTimeout": 10.0},
		"scaling":             map[string]any{"type": "QUEUE_DELAY", "queueDelay": 4.0},
		"timeout":             300000.0,
		"flashboot":           "OFF",
		"dataCenterIds":       []any{},
		"networkVolumes":      []any{},
		"allowedCudaVersions": []any{},
		"registry":            nil,
		"createdAt":           "2026-11-21T10:00:15Z",
		"requestUrls": map[string]any{
			"run":        "https://gantry.example/v2/" + id + "/run",
			"runSync":    "https://gantry.example/v2/" + id + "/runsync",
			"status":     "https://gantry.example/v2/" + id + "/status/{job_id}",
			"stream":     "https://gantry.example/v2/" + id + "/stream/{job_id}",
			"cancel":     "https://gantry.example/v2/" + id + "/cancel/{job_id}",
			"retry":      "https://gantry.example/v2/" + id + "/retry/{job_id}",
			"purgeQueue": "https://gantry.example/v2/" + id + "/purge-queue",
			"health":     "https://gantry.example/v2/" + id + "/health",
		},
	}
	for k, v := range want {
		if !reflect.DeepEqual(m[k], v) {
			t.Errorf("%s = %#v; want %#v", k, m[k], v)
		}
	}
	if len(id) != 14 {
		t.Errorf("id %q: want 14 characters", id)
	}

	// REQUEST_COUNT on a QUEUE endpoint: idleTimeout is omitted from the response.
	r = e.as(e.alice, "POST", "/v2/serverless", with(`{"scaling":{"type":"REQUEST_COUNT","requestCount":3}}`))
	if w := r.json(t)["workers"].(map[string]any); !reflect.DeepEqual(w, map[string]any{"min": 0.0, "max": 3.0}) {
		t.Errorf("workers = %v; want min and max only", w)
	}

	// LOAD_BALANCER: requestUrls has base and health only.
	r = e.as(e.alice, "POST", "/v2/serverless", with(`{"type":"LOAD_BALANCER","scaling":{"type":"REQUEST_COUNT","requestCount":4}}`))
	m = r.json(t)
	lbID := m["id"].(string)
	wantURLs := map[string]any{"base": "https://gantry.example/lb/" + lbID, "health": "https://gantry.example/v2/" + lbID + "/health"}
	if !reflect.DeepEqual(m["requestUrls"], wantURLs) {
		t.Errorf("LB requestUrls = %v; want %v", m["requestUrls"], wantURLs)
	}
	if w := m["workers"].(map[string]any); w["idleTimeout"] != 10.0 {
		t.Errorf("LB workers = %v; want idleTimeout 10", w)
	}
}

// TestTemplateRules covers template rules 1-6 of spec 4.1.
func TestTemplateRules(t *testing.T) {
	t.Parallel()
	e := setup(t)

	// Rules 1-4: resolved into container settings, body wins, env merged, CUDA seeded, pod flags ignored.
	r := e.as(e.alice, "POST", "/v2/serverless", with(`{"templateId":"tpl-pub","env":{"B":"body","C":"body"},"disk":50}`, "image"))
	if r.status != 201 {
		t.Fatalf("create from template = %d %s", r.status, r.body)
	}
	m := r.json(t)
	checks := map[string]any{
		"image": "example/worker:1", "args": "--serve", "disk": 50.0, "ports": []any{"8000/http"},
		"env":                 map[string]any{"A": "template", "B": "body", "C": "body"},
		"allowedCudaVersions": []any{"12.4"}, "templateId": "tpl-pub",
	}
	for k, v := range checks {
		if !reflect.DeepEqual(m[k], v) {
			t.Errorf("%s = %#v; want %#v", k, m[k], v)
		}
	}
	for _, k := range []string{"startSsh", "startJupyter"} {
		if _, ok := m[k]; ok {
			t.Errorf("endpoint carries the template's pod flag %s", k)
		}
	}

	// Explicit fields override, including an explicit empty CUDA list.
	r = e.as(e.alice, "POST", "/v2/serverless", with(`{"templateId":"tpl-pub","image":"mine:2","allowedCudaVersions":[],"ports":[]}`))
	m = r.json(t)
	if m["image"] != "mine:2" || !reflect.DeepEqual(m["allowedCudaVersions"], []any{}) {
		t.Errorf("override: image %v cuda %v; want mine:2 and []", m["image"], m["allowedCudaVersions"])
	}
	if _, ok := m["ports"]; ok && !reflect.DeepEqual(m["ports"], []any{}) {
		t.Errorf("ports = %v; want the body's empty list", m["ports"])
	}

	// The seeded CUDA versions must still be offered by the listed pools.
	r = e.as(e.alice, "POST", "/v2/serverless", with(`{"templateId":"tpl-pub","gpu":{"pools":["h100-us"]}}`, "image"))
	if got := r.errors(t); r.status != 422 || !slices.Equal(got, []string{"$.allowedCudaVersions[0]: CUDA 12.4 is not offered by the listed pools (offered: 12.8)"}) {
		t.Errorf("seeded CUDA on h100 = %d %q", r.status, got)
	}

	// Rule 6: unknown -> 404, another user's -> 404, not serverless -> 422.
	r = e.as(e.alice, "POST", "/v2/serverless", with(`{"templateId":"nope"}`, "image"))
	if r.status != 404 || r.json(t)["detail"] != `template "nope" not found` {
		t.Errorf("unknown template = %d %s; want 404", r.status, r.body)
	}
	r = e.as(e.bob, "POST", "/v2/templates", `{"name":"bobs","image":"bob:1","isServerless":true}`)
	bobs := r.json(t)["id"].(string)
	r = e.as(e.alice, "POST", "/v2/serverless", with(`{"templateId":"`+bobs+`"}`, "image"))
	if r.status != 404 {
		t.Errorf("another user's template = %d %s; want 404", r.status, r.body)
	}
	r = e.as(e.alice, "POST", "/v2/serverless", with(`{"templateId":"tpl-pod"}`, "image"))
	if got := r.errors(t); r.status != 422 || !slices.Equal(got, []string{`$.templateId: template "tpl-pod" is not a serverless template`}) {
		t.Errorf("pod template = %d %q; want 422", r.status, got)
	}

	// Rule 5: later template edits do not change the endpoint.
	r = e.as(e.alice, "POST", "/v2/templates", `{"name":"own","image":"own:1","isServerless":true,"env":{"K":"v1"}}`)
	own := r.json(t)["id"].(string)
	id := e.create(with(`{"templateId":"`+own+`"}`, "image"))
	if r := e.as(e.alice, "PATCH", "/v2/templates/"+own, `{"image":"own:2","env":{"K":"v2"}}`); r.status != 200 {
		t.Fatalf("PATCH template = %d %s", r.status, r.body)
	}
	m = e.as(e.alice, "GET", "/v2/serverless/"+id, "").json(t)
	if m["image"] != "own:1" || !reflect.DeepEqual(m["env"], map[string]any{"K": "v1"}) {
		t.Errorf("after template edit: image %v env %v; want the snapshot own:1 K=v1", m["image"], m["env"])
	}
}
