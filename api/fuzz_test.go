package api_test

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/core"
)

// fuzzRequest sends body to method path through the handler in memory and checks what any
// input must get: no panic, never a 5xx, and a well-formed problem+json body on every error.
func fuzzRequest(t *testing.T, e *env, method, path string, body []byte) {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.alice)
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	e.api.ServeHTTP(w, req)
	if w.Code >= 500 {
		t.Fatalf("%s %s %q = %d %s; want no 5xx", method, path, body, w.Code, w.Body)
	}
	if w.Code < 300 {
		return
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%q: Content-Type %q; want application/problem+json", body, ct)
	}
	var p struct {
		Title  string   `json:"title"`
		Status int      `json:"status"`
		Detail string   `json:"detail"`
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != w.Code || p.Title == "" || p.Detail == "" {
		t.Fatalf("%q: problem body %s (%v)", body, w.Body, err)
	}
	for _, e := range p.Errors {
		if !strings.HasPrefix(e, "$") || !strings.Contains(e, ": ") {
			t.Fatalf("%q: error %q is not `<json path>: <message>`", body, e)
		}
	}
}

func fuzzSeeds(f *testing.F) {
	for _, s := range []string{
		minimalQueue,
		with(`{"type":"LOAD_BALANCER","scaling":{"type":"REQUEST_COUNT","requestCount":1},"workers":{"min":0,"max":1,"idleTimeout":5}}`),
		with(`{"templateId":"tpl-pub","env":{"A":"b"},"allowedCudaVersions":["12.4"],"ports":["80/http"],"registry":null}`, "image"),
		`{"name":"","gpu":{"pools":[]},"scaling":{}}`, `[]`, `null`, `{"name":`, `{"gpu":{"count":1e999}}`,
	} {
		f.Add([]byte(s))
	}
}

// FuzzCreateEndpoint fuzzes the create body decoder and validator.
func FuzzCreateEndpoint(f *testing.F) {
	fuzzSeeds(f)
	e := setup(f, setupOpts{quota: core.Quota{}})
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzRequest(t, e, "POST", "/v2/serverless", body)
	})
}

// FuzzUpdateEndpoint fuzzes the partial-update decoder and the re-validation of the result.
func FuzzUpdateEndpoint(f *testing.F) {
	fuzzSeeds(f)
	f.Add([]byte(`{"scaling":{"type":"REQUEST_COUNT","requestCount":2},"workers":{"idleTimeout":3}}`))
	e := setup(f, setupOpts{quota: core.Quota{}})
	id := e.create(minimalQueue)
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzRequest(t, e, "PATCH", "/v2/serverless/"+id, body)
	})
}
