package api_test

import (
	"net/http"
	"os"
	"strconv"
	"testing"
)

func TestServeOpenAPI(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile("../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := setup(t)
	tests := []struct {
		name, auth string
	}{
		{"no key", ""},
		{"a key", "Bearer " + e.alice},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("GET", "/openapi.yaml", tt.auth, "")
			if r.status != http.StatusOK {
				t.Fatalf("GET /openapi.yaml = %d %s; want 200", r.status, r.body)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/yaml" {
				t.Errorf("Content-Type = %q; want application/yaml", ct)
			}
			if r.body != string(want) {
				t.Errorf("body (%d bytes) is not openapi.yaml (%d bytes)", len(r.body), len(want))
			}
		})
	}
	if r := e.do("POST", "/openapi.yaml", "", ""); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /openapi.yaml = %d; want 405", r.status)
	}
}

// TestHeadOpenAPI: /openapi.yaml answers HEAD as it answers GET, without the body, as /healthz,
// /metrics and /files do; another method's 405 names both in Allow.
func TestHeadOpenAPI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	get := e.do("GET", "/openapi.yaml", "", "")
	r := e.do("HEAD", "/openapi.yaml", "", "")
	if r.status != http.StatusOK || r.body != "" {
		t.Fatalf("HEAD /openapi.yaml = %d with %d body bytes (%.200s); want 200 and no body", r.status, len(r.body), r.body)
	}
	if r.header.Get("Content-Type") != "application/yaml" || r.header.Get("Content-Length") != strconv.Itoa(len(get.body)) {
		t.Errorf("HEAD /openapi.yaml: Content-Type %q, Content-Length %q; want application/yaml, %d",
			r.header.Get("Content-Type"), r.header.Get("Content-Length"), len(get.body))
	}
	if r := e.do("DELETE", "/openapi.yaml", "", ""); r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != "GET, HEAD" {
		t.Errorf("DELETE /openapi.yaml = %d, Allow %q; want 405, Allow \"GET, HEAD\"", r.status, r.header.Get("Allow"))
	}
}
