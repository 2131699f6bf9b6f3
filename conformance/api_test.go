package conformance

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// problem is the problem+json body every error has.
type problem struct {
	Title  string   `json:"title"`
	Status int      `json:"status"`
	Detail string   `json:"detail"`
	Errors []string `json:"errors"`
	Error  string   `json:"error"`
}

func (r response) problem(t *testing.T) problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q; want application/problem+json (body %s)", ct, r.body)
	}
	var p problem
	if err := json.Unmarshal(r.body, &p); err != nil || p.Status != r.status || p.Title == "" || p.Detail == "" {
		t.Errorf("problem body %s (%v); want title, status %d and detail", r.body, err, r.status)
	}
	return p
}

func echoEndpoint(name string, extra string) string {
	return fmt.Sprintf(`{"name":%q,"type":"QUEUE","image":%q,"gpu":{"pools":[%q]},"scaling":{"type":"QUEUE_DELAY","queueDelay":2}%s}`,
		name, echoImage, poolID, extra)
}

// create makes an endpoint as alice and returns it.
func create(t *testing.T, body string) map[string]any {
	t.Helper()
	r := do(t, "POST", "/v2/serverless", "Bearer "+gantry.key, body)
	if r.status != 201 {
		t.Fatalf("create = %d %s", r.status, r.body)
	}
	var ep map[string]any
	_ = json.Unmarshal(r.body, &ep)
	t.Cleanup(func() { do(t, "DELETE", "/v2/serverless/"+ep["id"].(string), "Bearer "+gantry.key, "") })
	return ep
}

var (
	rateLimitRE       = regexp.MustCompile(`^"minute";r=\d+;t=\d+, "hour";r=\d+;t=\d+, "day";r=\d+;t=\d+$`)
	rateLimitPolicyRE = regexp.MustCompile(`^"minute";q=\d+;w=60, "hour";q=\d+;w=3600, "day";q=\d+;w=86400$`)
)

func TestManagementAPI(t *testing.T) {
	t.Parallel()
	ep := create(t, echoEndpoint("conformance-mgmt", `,"workers":{"min":0,"max":2,"idleTimeout":5}`))
	id := ep["id"].(string)
	urls, _ := ep["requestUrls"].(map[string]any)
	if ep["flashboot"] != "OFF" || urls["run"] != gantry.base+"/v2/"+id+"/run" {
		t.Errorf("created endpoint %v; want defaults and request URLs on this server", ep)
	}
	r := do(t, "GET", "/v2/serverless/"+id, "Bearer "+gantry.key, "")
	if r.status != 200 || !rateLimitRE.MatchString(r.header.Get("RateLimit")) || !rateLimitPolicyRE.MatchString(r.header.Get("RateLimit-Policy")) {
		t.Errorf("GET endpoint = %d, RateLimit %q, RateLimit-Policy %q; want 200 and RFC 9651 lists", r.status, r.header.Get("RateLimit"), r.header.Get("RateLimit-Policy"))
	}
	if r := do(t, "PATCH", "/v2/serverless/"+id, "Bearer "+gantry.key, `{"workers":{"min":0,"max":3,"idleTimeout":5}}`); r.status != 200 || !strings.Contains(string(r.body), `"max":3`) {
		t.Errorf("PATCH = %d %s", r.status, r.body)
	}
	if r := do(t, "GET", "/v2/serverless", "Bearer "+gantry.key, ""); r.status != 200 || !strings.Contains(string(r.body), id) {
		t.Errorf("list = %d %s; want it to contain %s", r.status, r.body, id)
	}
	if r := do(t, "GET", "/v2/catalog/gpus?include=AVAILABILITY", "Bearer "+gantry.key, ""); r.status != 200 || !strings.Contains(string(r.body), `"`+poolID+`"`) {
		t.Errorf("catalog = %d %s; want the %s pool", r.status, r.body, poolID)
	}
	if r := do(t, "GET", "/v2/serverless/"+id+"/workers", "Bearer "+gantry.key, ""); r.status != 200 || !strings.Contains(string(r.body), `"items":`) {
		t.Errorf("workers = %d %s", r.status, r.body)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	bob, err := newKey(t.Context(), "bob", "--quota-minute", "3")
	if err != nil {
		t.Fatal(err)
	}
	ep := create(t, echoEndpoint("conformance-errors", ""))
	id := ep["id"].(string)
	for _, tc := range []struct {
		name, method, path, auth, body string
		status                         int
		has                            string
	}{
		{"malformed JSON", "POST", "/v2/serverless", "Bearer " + gantry.key, `{"name":`, 400, ""},
		{"rule broken", "POST", "/v2/serverless", "Bearer " + gantry.key, echoEndpoint("x", `,"workers":{"min":5,"max":2}`), 422, "$.workers"},
		{"unknown property", "POST", "/v2/serverless", "Bearer " + gantry.key, echoEndpoint("x", `,"colour":"red"`), 422, "$.colour"},
		{"no key", "GET", "/v2/serverless", "", "", 401, ""},
		{"unknown key", "GET", "/v2/serverless", "Bearer gk_nope", "", 401, ""},
		{"another user's endpoint", "GET", "/v2/serverless/" + id, "Bearer " + bob, "", 404, ""},
		{"unknown job", "GET", "/v2/" + id + "/status/nope", gantry.key, "", 404, ""},
		{"wait out of range", "POST", "/v2/" + id + "/runsync?wait=5", gantry.key, `{"input":{}}`, 422, "wait"},
		{"input not an object", "POST", "/v2/" + id + "/run", gantry.key, `{"input":[1]}`, 422, "$.input"},
	} {
		r := do(t, tc.method, tc.path, tc.auth, tc.body)
		if r.status != tc.status {
			t.Errorf("%s: %s %s = %d %s; want %d", tc.name, tc.method, tc.path, r.status, r.body, tc.status)
			continue
		}
		p := r.problem(t)
		if tc.has != "" && !strings.Contains(strings.Join(append(p.Errors, p.Detail), " "), tc.has) {
			t.Errorf("%s: problem %+v; want it to name %s", tc.name, p, tc.has)
		}
		if tc.status == 401 && r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tc.name)
		}
	}
	// bob's 3 requests a minute: the 4th is 429 with Retry-After, naming the window.
	var last response
	for range 4 {
		last = do(t, "GET", "/v2/serverless", "Bearer "+bob, "")
	}
	if p := last.problem(t); last.status != 429 || last.header.Get("Retry-After") == "" || !strings.Contains(p.Detail, "minute") {
		t.Errorf("over quota = %d %s (Retry-After %q); want 429 naming the minute window", last.status, last.body, last.header.Get("Retry-After"))
	}
}
