package api_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestUpdateEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create(with(`{"gpu":{"pools":["a100-eu"],"count":2},"env":{"A":"1"},"workers":{"min":1,"max":4,"idleTimeout":30}}`))
	path := "/v2/serverless/" + id
	tests := []struct {
		name   string
		patch  string
		status int
		check  map[string]any // fields of the response after the patch
		errors []string
	}{
		{"name only keeps the rest", `{"name":"renamed"}`, 200,
			map[string]any{"name": "renamed", "workers": map[string]any{"min": 1.0, "max": 4.0, "idleTimeout": 30.0}, "env": map[string]any{"A": "1"}}, nil},
		{"workers merge per field", `{"workers":{"max":6}}`, 200,
			map[string]any{"workers": map[string]any{"min": 1.0, "max": 6.0, "idleTimeout": 30.0}}, nil},
		{"gpu pools without count keeps the count", `{"gpu":{"pools":["h100-us","a100-eu"]}}`, 200,
			map[string]any{"gpu": map[string]any{"pools": []any{"h100-us", "a100-eu"}, "count": 2.0}}, nil},
		{"switch to REQUEST_COUNT drops idleTimeout", `{"scaling":{"type":"REQUEST_COUNT","requestCount":2}}`, 200,
			map[string]any{"workers": map[string]any{"min": 1.0, "max": 6.0}}, nil},
		{"idleTimeout refused on QUEUE + REQUEST_COUNT", `{"workers":{"idleTimeout":20}}`, 422, nil,
			[]string{"$.workers.idleTimeout: does not apply to a QUEUE endpoint scaling on REQUEST_COUNT; omit it"}},
		{"switch back restores the default idleTimeout", `{"scaling":{"type":"QUEUE_DELAY","queueDelay":1}}`, 200,
			map[string]any{"workers": map[string]any{"min": 1.0, "max": 6.0, "idleTimeout": 10.0}}, nil},
		{"merged result is validated", `{"workers":{"max":0}}`, 422, nil, []string{"$.workers.min: must not exceed workers.max (0)"}},
		{"type cannot change", `{"type":"LOAD_BALANCER"}`, 422, nil, []string{"$.type: unknown property"}},
		{"templateId cannot change", `{"templateId":"tpl-pub"}`, 422, nil, []string{"$.templateId: unknown property"}},
		{"env replaced whole", `{"env":{"B":"2"}}`, 200, map[string]any{"env": map[string]any{"B": "2"}}, nil},
		{"registry set and cleared", `{"registry":"cred"}`, 200, map[string]any{"registry": "cred"}, nil},
		{"registry null", `{"registry":null}`, 200, map[string]any{"registry": nil}, nil},
		{"cuda checked against the new pools", `{"allowedCudaVersions":["12.6"],"gpu":{"pools":["h100-us"]}}`, 422, nil,
			[]string{"$.allowedCudaVersions[0]: CUDA 12.6 is not offered by the listed pools (offered: 12.8)"}},
		{"flashboot and timeout", `{"flashboot":"PRIORITY_FLASHBOOT","timeout":1000}`, 200,
			map[string]any{"flashboot": "PRIORITY_FLASHBOOT", "timeout": 1000.0}, nil},
	}
	for _, tc := range tests { // in order: each patch builds on the last
		r := e.as(e.alice, "PATCH", path, tc.patch)
		if r.status != tc.status {
			t.Fatalf("%s: PATCH %s = %d %s; want %d", tc.name, tc.patch, r.status, r.body, tc.status)
		}
		if tc.errors != nil && !slices.Equal(r.errors(t), tc.errors) {
			t.Errorf("%s: errors = %q; want %q", tc.name, r.errors(t), tc.errors)
		}
		m := r.json(t)
		for k, v := range tc.check {
			if !reflect.DeepEqual(m[k], v) {
				t.Errorf("%s: %s = %#v; want %#v", tc.name, k, m[k], v)
			}
		}
	}
	// A refused patch changed nothing.
	if m := e.as(e.alice, "GET", path, "").json(t); m["flashboot"] != "PRIORITY_FLASHBOOT" || m["name"] != "renamed" {
		t.Errorf("after the patches: %v", m)
	}
	if r := e.as(e.alice, "PATCH", "/v2/serverless/nope", `{"name":"x"}`); r.status != 404 {
		t.Errorf("PATCH unknown = %d; want 404", r.status)
	}
}

func TestDeleteEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create(minimalQueue)
	r := e.do("POST", "/v2/"+id+"/run", e.alice, `{"input":{}}`)
	job := r.json(t)["id"].(string)
	if r := e.as(e.alice, "DELETE", "/v2/serverless/"+id, ""); r.status != 204 || r.body != "" {
		t.Fatalf("DELETE = %d %q; want 204 with no body", r.status, r.body)
	}
	if r := e.as(e.alice, "GET", "/v2/serverless/"+id, ""); r.status != 404 {
		t.Errorf("GET after DELETE = %d; want 404", r.status)
	}
	if r := e.as(e.alice, "DELETE", "/v2/serverless/"+id, ""); r.status != 404 {
		t.Errorf("second DELETE = %d; want 404", r.status)
	}
	if h := e.engine.Health(t.Context(), id); h.InQueue != 0 {
		t.Errorf("a deleted endpoint still has %d queued jobs (job %s); want its queue cancelled", h.InQueue, job)
	}
}

func TestListEndpointsPaginates(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var want []string
	for i := range 5 {
		e.clock.Set(t0.Add(time.Duration(i) * time.Millisecond))
		want = append(want, e.create(with(fmt.Sprintf(`{"name":"ep%d"}`, i))))
	}
	e.as(e.bob, "POST", "/v2/serverless", minimalQueue) // not alice's
	var got []string
	cursor, pages := "", 0
	for {
		r := e.as(e.alice, "GET", "/v2/serverless?limit=2&cursor="+cursor, "")
		if r.status != 200 {
			t.Fatalf("list = %d %s", r.status, r.body)
		}
		m := r.json(t)
		for _, it := range m["items"].([]any) {
			got = append(got, it.(map[string]any)["id"].(string))
		}
		pages++
		next, ok := m["nextCursor"].(string)
		if !ok {
			break
		}
		cursor = next
	}
	if !slices.Equal(got, want) || pages != 3 {
		t.Errorf("listed %v in %d pages; want %v in 3", got, pages, want)
	}
	if r := e.as(e.alice, "GET", "/v2/serverless?cursor=bogus", ""); r.status != 422 {
		t.Errorf("bad cursor = %d %s; want 422", r.status, r.body)
	}
	if r := e.as(e.alice, "GET", "/v2/serverless?limit=101", ""); r.status != 422 {
		t.Errorf("limit 101 = %d; want 422", r.status)
	}
}

func TestTemplatesCRUD(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.as(e.alice, "POST", "/v2/templates", `{"name":"t","image":"img:1","ports":["80/http"],"env":{"K":"v"},"allowedCudaVersions":["12.4"],"startSsh":true}`)
	if r.status != 201 {
		t.Fatalf("create = %d %s", r.status, r.body)
	}
	m := r.json(t)
	id := m["id"].(string)
	for k, v := range map[string]any{"isServerless": false, "isPublic": false, "startSsh": true, "startJupyter": false, "registry": nil} {
		if !reflect.DeepEqual(m[k], v) {
			t.Errorf("%s = %v; want %v", k, m[k], v)
		}
	}
	for _, bad := range []struct{ body, err string }{
		{`{"name":"t"}`, "$.image: is required"},
		{`{"name":"t","image":"i","gpu":1}`, "$.gpu: unknown property"},
		{`{"name":"t","image":"i","env":{"A-B":"x"}}`, `$.env.A-B: "A-B" is not a valid environment variable name`},
	} {
		if r := e.as(e.alice, "POST", "/v2/templates", bad.body); r.status != 422 || !slices.Equal(r.errors(t), []string{bad.err}) {
			t.Errorf("POST %s = %d %q; want 422 %q", bad.body, r.status, r.errors(t), bad.err)
		}
	}
	r = e.as(e.alice, "PATCH", "/v2/templates/"+id, `{"isServerless":true,"name":"t2"}`)
	if m := r.json(t); r.status != 200 || m["isServerless"] != true || m["name"] != "t2" || m["image"] != "img:1" {
		t.Errorf("PATCH = %d %s", r.status, r.body)
	}
	if r := e.as(e.alice, "GET", "/v2/templates", ""); len(r.json(t)["items"].([]any)) != 1 {
		t.Errorf("list = %s; want one template", r.body)
	}
	if r := e.as(e.alice, "GET", "/v2/templates/tpl-pub", ""); r.status != 200 || r.json(t)["isPublic"] != true {
		t.Errorf("GET public template = %d %s", r.status, r.body)
	}
	if r := e.as(e.bob, "GET", "/v2/templates/"+id, ""); r.status != 404 {
		t.Errorf("bob GET alice's template = %d; want 404", r.status)
	}
	if r := e.as(e.alice, "DELETE", "/v2/templates/"+id, ""); r.status != 204 {
		t.Errorf("DELETE = %d", r.status)
	}
	if r := e.as(e.alice, "GET", "/v2/templates/"+id, ""); r.status != 404 {
		t.Errorf("GET after DELETE = %d; want 404", r.status)
	}
}

func TestCatalog(t *testing.T) {
	t.Parallel()
	e := setup(t)
	plain := e.as(e.alice, "GET", "/v2/catalog/gpus", "")
	if strings.Contains(plain.body, "cudaVersions") || strings.Contains(plain.body, "available") {
		t.Errorf("without include: %s; want no availability fields", plain.body)
	}
	r := e.as(e.alice, "GET", "/v2/catalog/gpus?include=AVAILABILITY", "")
	want := `[{"id":"NVIDIA A100 80GB PCIe","displayName":"A100 80GB","memoryInGb":80,"pool":"a100-eu","count":8,"dataCenterId":"EU-RO-1","cudaVersions":["12.4","12.6"],"available":8,"maxGpuCount":4},` +
		`{"id":"NVIDIA H100 80GB HBM3","displayName":"H100 80GB","memoryInGb":80,"pool":"h100-us","count":2,"dataCenterId":"US-TX-3","cudaVersions":["12.8"],"available":2,"maxGpuCount":2},` +
		`{"id":"CPU","displayName":"CPU slot","pool":"cpu","count":4,"dataCenterId":"LOCAL","cudaVersions":[],"available":4,"maxGpuCount":1}]`
	if strings.TrimSpace(r.body) != want {
		t.Errorf("gpus =\n%s\nwant\n%s", r.body, want)
	}
	if r := e.as(e.alice, "GET", "/v2/catalog/gpus?include=PRICES", ""); r.status != 422 {
		t.Errorf("include=PRICES = %d; want 422", r.status)
	}
	r = e.as(e.alice, "GET", "/v2/catalog/cpus", "")
	if want := `[{"id":"cpu-cpu","displayName":"CPU slot","vcpuCounts":[2,4,8],"memoryPerVcpu":2,"pool":"cpu"}]`; strings.TrimSpace(r.body) != want {
		t.Errorf("cpus = %s; want %s", r.body, want)
	}
	r = e.as(e.alice, "GET", "/v2/catalog/templates", "")
	var ids []string
	for _, it := range r.json2(t) {
		ids = append(ids, it["id"].(string))
	}
	if !slices.Equal(ids, []string{"tpl-pub", "tpl-pod"}) {
		t.Errorf("catalog templates = %v", ids)
	}
}

func TestCreateEndpointV1(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.as(e.alice, "POST", "/v1/endpoints", `{"name":"old","templateId":"tpl-pub","gpuTypeIds":["NVIDIA H100 80GB HBM3","NVIDIA A100 80GB PCIe"],"workersMin":0,"workersMax":2,"idleTimeout":7,"allowedCudaVersions":[]}`)
	if r.status != 200 {
		t.Fatalf("v1 create = %d %s", r.status, r.body)
	}
	m := r.json(t)
	for k, v := range map[string]any{
		"gpuTypeIds": []any{"NVIDIA H100 80GB HBM3", "NVIDIA A100 80GB PCIe"}, "workersMax": 2.0, "idleTimeout": 7.0,
		"scalerType": "QUEUE_DELAY", "scalerValue": 4.0, "flashboot": false, "executionTimeoutMs": 300000.0, "gpuCount": 1.0,
	} {
		if !reflect.DeepEqual(m[k], v) {
			t.Errorf("%s = %#v; want %#v", k, m[k], v)
		}
	}
	// The same endpoint through v2: the GPU types became pools in priority order.
	v2 := e.as(e.alice, "GET", "/v2/serverless/"+m["id"].(string), "").json(t)
	if got := v2["gpu"].(map[string]any)["pools"]; !reflect.DeepEqual(got, []any{"h100-us", "a100-eu"}) {
		t.Errorf("v2 pools = %v; want [h100-us a100-eu]", got)
	}
	for _, bad := range []struct{ body, err string }{
		{`{"name":"x","templateId":"tpl-pub","gpuTypeIds":["CPU","RTX 9090"]}`, `$.gpuTypeIds[1]: unknown GPU type "RTX 9090" (see GET /v2/catalog/gpus)`},
		{`{"name":"x","templateId":"tpl-pub","gpuTypeIds":["NVIDIA A100 80GB PCIe"],"scalerType":"REQUEST_COUNT","idleTimeout":5}`, "$.idleTimeout: does not apply to a QUEUE endpoint scaling on REQUEST_COUNT; omit it"},
		{`{"name":"x","templateId":"tpl-pub","gpuTypeIds":["NVIDIA A100 80GB PCIe"],"scalerType":"REQUEST_COUNT","scalerValue":2.5}`, "$.scalerValue: must be a whole number of at least 1 for REQUEST_COUNT"},
		{`{"name":"x","templateId":"tpl-pub","gpuTypeIds":["NVIDIA A100 80GB PCIe"],"workersMin":5,"workersMax":1}`, "$.workersMin: must not exceed workers.max (1)"},
		{`{"name":"x","templateId":"tpl-pub","gpuTypeIds":["NVIDIA A100 80GB PCIe"],"gpuCount":8}`, "$.gpuCount: 8 GPUs per worker is more than any listed pool can give one worker (at most 4)"},
		{`{"name":"x","gpuTypeIds":["CPU"]}`, "$.templateId: is required"},
		{`{"name":"x","templateId":"tpl-pub","gpuTypeIds":[]}`, "$.gpuTypeIds: must not be empty"},
	} {
		if r := e.as(e.alice, "POST", "/v1/endpoints", bad.body); r.status != 422 || !slices.Equal(r.errors(t), []string{bad.err}) {
			t.Errorf("POST %s = %d %q; want 422 %q", bad.body, r.status, r.errors(t), bad.err)
		}
	}
	if r := e.as(e.alice, "POST", "/v1/endpoints", `{"name":"x","templateId":"missing","gpuTypeIds":["CPU"]}`); r.status != 404 {
		t.Errorf("unknown template = %d; want 404", r.status)
	}
}

// TestBodyCaps: each operation has its own cap (spec 8): 10 MB for run, 20 MB for runsync.
func TestBodyCaps(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create(minimalQueue)
	input := func(n int) string { return `{"input":{"blob":"` + strings.Repeat("a", n) + `"}}` }
	tests := []struct {
		path   string
		size   int
		status int
	}{
		{"/v2/" + id + "/run", 9 << 20, 200},
		{"/v2/" + id + "/run", 11 << 20, 413},
		{"/v2/" + id + "/runsync?wait=1000", 19 << 20, 200},
		{"/v2/" + id + "/runsync?wait=1000", 21 << 20, 413},
	}
	for _, tc := range tests {
		r := e.do("POST", tc.path, e.alice, input(tc.size))
		if r.status != tc.status {
			t.Errorf("POST %s with %d MB = %d %.200s; want %d", tc.path, tc.size>>20, r.status, r.body, tc.status)
		}
	}
}
