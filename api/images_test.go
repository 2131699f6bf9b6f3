package api_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/gantryhq/gantry/core"
)

// TestImageNoPoolCanRun refuses (422) an endpoint whose image every listed pool knows it
// cannot run, naming each pool and the fix, on create and on update; a pool that can run it,
// or cannot tell, lets it through.
func TestImageNoPoolCanRun(t *testing.T) {
	t.Parallel()
	// a100-eu runs only mapped/worker:1; h100-us runs nothing; cpu cannot tell.
	canRun := func(pool, image string) (bool, string) {
		switch {
		case pool == "a100-eu" && image != "mapped/worker:1":
			return false, "pool a100-eu (process) has no images: entry for " + image
		case pool == "h100-us":
			return false, "pool h100-us (process) has no images: entry for " + image
		}
		return true, ""
	}
	e := setup(t, setupOpts{quota: core.Quota{Minute: 1000, Hour: 10000, Day: 100000}, canRun: canRun})
	body := func(image, pools string) string {
		return `{"name":"ep","type":"QUEUE","image":"` + image + `","gpu":{"pools":` + pools + `},"scaling":{"type":"QUEUE_DELAY","queueDelay":4}}`
	}
	tests := []struct {
		name, image, pools string
		wantErrs           []string // nil: 201
	}{
		{"one pool that cannot", "other/worker:1", `["a100-eu"]`,
			[]string{`$.image: no listed pool can run image "other/worker:1": pool a100-eu (process) has no images: entry for other/worker:1`}},
		{"every pool cannot", "other/worker:1", `["a100-eu","h100-us"]`,
			[]string{`$.image: no listed pool can run image "other/worker:1": pool a100-eu (process) has no images: entry for other/worker:1; pool h100-us (process) has no images: entry for other/worker:1`}},
		{"one pool can", "mapped/worker:1", `["h100-us","a100-eu"]`, nil},
		{"one pool cannot tell", "other/worker:1", `["a100-eu","cpu"]`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.as(e.alice, "POST", "/v2/serverless", body(tt.image, tt.pools))
			if tt.wantErrs == nil {
				if r.status != http.StatusCreated {
					t.Fatalf("create = %d %s; want 201", r.status, r.body)
				}
				return
			}
			if r.status != http.StatusUnprocessableEntity || r.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("create = %d %s %s; want 422 problem+json", r.status, r.header.Get("Content-Type"), r.body)
			}
			if got := r.errors(t); !slices.Equal(got, tt.wantErrs) {
				t.Errorf("create errors = %q; want %q", got, tt.wantErrs)
			}
		})
	}

	id := e.create(body("mapped/worker:1", `["a100-eu"]`))
	r := e.as(e.alice, "PATCH", "/v2/serverless/"+id, `{"image":"other/worker:1"}`)
	want := []string{`$.image: no listed pool can run image "other/worker:1": pool a100-eu (process) has no images: entry for other/worker:1`}
	if r.status != http.StatusUnprocessableEntity || !slices.Equal(r.errors(t), want) {
		t.Errorf("PATCH image = %d %s; want 422 with %q", r.status, r.body, want)
	}
	if got := e.as(e.alice, "GET", "/v2/serverless/"+id, "").json(t)["image"]; got != "mapped/worker:1" {
		t.Errorf("after the refused PATCH, image = %v; want mapped/worker:1 kept", got)
	}
}
