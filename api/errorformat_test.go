package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestReadKeyTTL: a read key gets a job's status but may not change its ttl (a short one would
// remove the job from under its owner); the job is left as it was.
func TestReadKeyTTL(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create(minimalQueue)
	job := e.do("POST", "/v2/"+id+"/run", e.alice, `{"input":{}}`).json(t)["id"].(string)
	const detail = `this key's scope \"read\" may read a job's status but not change its ttl (it needs scope all or jobs)`
	tests := []struct {
		name, method, path, key string
		status                  int
		want                    string // the body, or "" for a 200 job
	}{
		{"GET status ttl", "GET", "/v2/" + id + "/status/" + job + "?ttl=1", e.read, 403,
			`{"title":"Forbidden","status":403,"detail":"` + detail + `","error":"` + detail + `"}`},
		{"POST status ttl", "POST", "/v2/" + id + "/status/" + job + "?ttl=1", e.read, 403,
			`{"title":"Forbidden","status":403,"detail":"` + detail + `","error":"` + detail + `"}`},
		{"GET status-sync ttl", "GET", "/v2/" + id + "/status-sync/" + job + "?wait=1000&ttl=1", e.read, 403,
			`{"title":"Forbidden","status":403,"detail":"` + detail + `","error":"` + detail + `"}`},
		{"POST status-sync ttl", "POST", "/v2/" + id + "/status-sync/" + job + "?wait=1000&ttl=1", e.read, 403,
			`{"title":"Forbidden","status":403,"detail":"` + detail + `","error":"` + detail + `"}`},
		{"read key without ttl", "GET", "/v2/" + id + "/status/" + job, e.read, 200, ""},
		{"the owner still sees the job", "GET", "/v2/" + id + "/status/" + job, e.alice, 200, ""},
	}
	for _, tc := range tests {
		r := e.do(tc.method, tc.path, tc.key, "")
		if r.status != tc.status {
			t.Errorf("%s: %s %s = %d %s; want %d", tc.name, tc.method, tc.path, r.status, r.body, tc.status)
			continue
		}
		if tc.want != "" && strings.TrimSpace(r.body) != tc.want {
			t.Errorf("%s: body = %s; want %s", tc.name, r.body, tc.want)
		}
		if tc.want != "" && r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: Content-Type = %q; want application/problem+json", tc.name, r.header.Get("Content-Type"))
		}
		if tc.status == http.StatusOK && r.json(t)["status"] != "IN_QUEUE" {
			t.Errorf("%s: status = %v; want IN_QUEUE (the job untouched)", tc.name, r.json(t)["status"])
		}
	}
}
