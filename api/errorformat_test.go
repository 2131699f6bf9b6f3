package api_test

import (
	"net/http"
	"strconv"
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

// TestBodyErrors: a missing or broken Content-Type is 415, a body without Unicode text is 400
// naming the path of the bad string, each as problem+json; good text (pairs, escaped
// backslashes) is taken.
func TestBodyErrors(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create(minimalQueue)
	run := "/v2/" + id + "/run"
	const missing = `the Content-Type header is missing; the body must be application/json`
	const broken = `the Content-Type header \"application/json;;;\" is not a valid media type; the body must be application/json`
	job := func(detail string) string { return `"detail":"` + detail + `","error":"` + detail + `"}` }
	bad := func(path, msg string) string {
		return `"detail":"` + path + `: ` + msg + `","errors":["` + path + `: ` + msg + `"],"error":"` + path + `: ` + msg + `"}`
	}
	tests := []struct {
		name, method, path, auth, ctype, body string
		status                                int
		want                                  string // the body after its title and status
	}{
		{"no Content-Type on create", "POST", "/v2/serverless", "Bearer " + e.alice, "", minimalQueue, 415,
			`"detail":"` + missing + `"}`},
		{"no Content-Type on run", "POST", run, e.alice, "", `{"input":{}}`, 415, job(missing)},
		{"broken Content-Type", "POST", run, e.alice, "application/json;;;", `{"input":{}}`, 415, job(broken)},
		{"broken Content-Type, no body", "POST", run, e.alice, "application/json;;;", "", 415, job(broken)},
		{"no Content-Type, no body", "POST", run, e.alice, "", "", 400, job("a JSON body is required")},
		{"invalid UTF-8", "POST", run, e.alice, "application/json", "{\"input\":{\"prompt\":\"a\xffb\"}}", 400,
			bad("$.input.prompt", "is not valid UTF-8 (at byte offset 21 of the body)")},
		{"invalid UTF-8 in an array", "POST", run, e.alice, "application/json", "{\"input\":{\"p\":[\"ok\",{\"q\":\"\xc3\"}]}}", 400,
			bad("$.input.p[1].q", "is not valid UTF-8 (at byte offset 26 of the body)")},
		{"lone high surrogate", "POST", run, e.alice, "application/json", `{"input":{"prompt":"x\ud800y"}}`, 400,
			bad("$.input.prompt", `holds a lone surrogate escape (\\ud800): it is not Unicode text`)},
		{"lone low surrogate", "POST", run, e.alice, "application/json", `{"input":{"a":1,"b":"\uDC00"}}`, 400,
			bad("$.input.b", `holds a lone surrogate escape (\\uDC00): it is not Unicode text`)},
		{"reversed pair", "POST", run, e.alice, "application/json", `{"input":{"b":"\udc00\ud800"}}`, 400,
			bad("$.input.b", `holds a lone surrogate escape (\\udc00): it is not Unicode text`)},
		{"bad property name", "POST", run, e.alice, "application/json", `{"input":{"\ud800":1}}`, 400,
			bad(`$.input.\"\\\\ud800\"`, `the property name holds a lone surrogate escape (\\ud800): it is not Unicode text`)},
		{"management body", "POST", "/v2/serverless", "Bearer " + e.alice, "application/json", "{\"name\":\"\xff\"}", 400,
			`"detail":"$.name: is not valid UTF-8 (at byte offset 9 of the body)","errors":["$.name: is not valid UTF-8 (at byte offset 9 of the body)"]}`},
		{"a pair is text", "POST", run, e.alice, "application/json", `{"input":{"e":"\ud83d\ude00 \uD83D\uDE00"}}`, 200, ""},
		{"an escaped backslash is text", "POST", run, e.alice, "application/json", `{"input":{"e":"\\ud800"}}`, 200, ""},
		{"UTF-8 is text", "POST", run, e.alice, "application/json", `{"input":{"e":"héllo 😀"}}`, 200, ""},
	}
	for _, tc := range tests {
		r := e.doRaw(tc.method, tc.path, tc.auth, tc.ctype, tc.body)
		if r.status != tc.status {
			t.Errorf("%s: %s %s = %d %s; want %d", tc.name, tc.method, tc.path, r.status, r.body, tc.status)
			continue
		}
		if tc.status == http.StatusOK {
			continue
		}
		want := `{"title":"` + http.StatusText(tc.status) + `","status":` + strconv.Itoa(tc.status) + `,` + tc.want
		if strings.TrimSpace(r.body) != want {
			t.Errorf("%s: body =\n %s\nwant\n %s", tc.name, r.body, want)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: Content-Type = %q; want application/problem+json", tc.name, ct)
		}
	}
}
