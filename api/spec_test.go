package api_test

import (
	"net/http"
	"os"
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
