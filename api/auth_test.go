package api_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/gantryhq/gantry/core"
)

// TestAuthMatrix checks spec 5 and DESIGN.md's 401/403/404 semantics across key kinds.
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create(minimalQueue)
	tests := []struct {
		name         string
		method, path string
		auth         string
		body         string
		status       int
	}{
		{"no key", "POST", "/v2/serverless", "", minimalQueue, 401},
		{"no key on a read", "GET", "/v2/serverless", "", "", 401},
		{"not a bearer", "GET", "/v2/serverless", "Basic " + e.alice, "", 401},
		{"bare key on management", "GET", "/v2/serverless", e.alice, "", 401},
		{"empty bearer", "GET", "/v2/serverless", "Bearer ", "", 401},
		{"unknown key", "GET", "/v2/serverless", "Bearer gk_doesnotexist", "", 401},
		{"expired key", "GET", "/v2/serverless", "Bearer " + e.expired, "", 401},
		{"no key on a job operation", "GET", "/v2/" + id + "/health", "", "", 401},
		{"valid key", "GET", "/v2/serverless", "Bearer " + e.alice, "", 200},
		{"scheme is case-insensitive", "GET", "/v2/serverless", "bearer " + e.alice, "", 200},
		{"read key reads", "GET", "/v2/serverless/" + id, "Bearer " + e.read, "", 200},
		{"read key reads the catalog", "GET", "/v2/catalog/gpus", "Bearer " + e.read, "", 200},
		{"read key on a write", "POST", "/v2/serverless", "Bearer " + e.read, minimalQueue, 403},
		{"read key on a delete", "DELETE", "/v2/serverless/" + id, "Bearer " + e.read, "", 403},
		{"read key on PATCH", "PATCH", "/v2/serverless/" + id, "Bearer " + e.read, `{"name":"x"}`, 403},
		{"read key on v1 create", "POST", "/v1/endpoints", "Bearer " + e.read, `{"name":"x","templateId":"tpl-pub","gpuTypeIds":["CPU"]}`, 403},
		{"jobs key on management", "GET", "/v2/serverless", "Bearer " + e.jobs, "", 403},
		{"jobs key on templates", "POST", "/v2/templates", "Bearer " + e.jobs, `{"name":"t","image":"i"}`, 403},
		{"another user's endpoint: get", "GET", "/v2/serverless/" + id, "Bearer " + e.bob, "", 404},
		{"another user's endpoint: patch", "PATCH", "/v2/serverless/" + id, "Bearer " + e.bob, `{"name":"x"}`, 404},
		{"another user's endpoint: delete", "DELETE", "/v2/serverless/" + id, "Bearer " + e.bob, "", 404},
		{"public template is read-only", "PATCH", "/v2/templates/tpl-pub", "Bearer " + e.alice, `{"name":"x"}`, 403},
		// Job operations accept the key bare or as a bearer.
		{"job operation, bearer key", "GET", "/v2/" + id + "/health", "Bearer " + e.alice, "", 200},
		{"job operation, bare key", "GET", "/v2/" + id + "/health", e.alice, "", 200},
		{"job operation, read key", "GET", "/v2/" + id + "/health", e.read, "", 200},
		{"job write, read key", "POST", "/v2/" + id + "/purge-queue", e.read, "", 403},
		{"jobs key, endpoint not listed", "POST", "/v2/" + id + "/purge-queue", e.jobs, "", 403},
		{"job operation, another user's endpoint", "GET", "/v2/" + id + "/health", e.bob, "", 404},
		{"worker route, user key", "GET", "/v2/" + id + "/job-take/w1", e.alice, "", 401},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(tc.method, tc.path, tc.auth, tc.body)
			if r.status != tc.status {
				t.Fatalf("%s %s = %d %s; want %d", tc.method, tc.path, r.status, r.body, tc.status)
			}
			hasRL := r.header.Get("RateLimit") != "" && r.header.Get("RateLimit-Policy") != ""
			if want := tc.status != 401; hasRL != want {
				t.Errorf("rate-limit headers present = %v; want %v (status %d)", hasRL, want, tc.status)
			}
			if tc.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
		})
	}
}

// TestGoldenErrors pins status and body of every error class (spec 7).
func TestGoldenErrors(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create(minimalQueue)
	big := `{"name":"` + strings.Repeat("x", 1<<20) + `"}`
	tests := []struct {
		name         string
		method, path string
		auth, ctype  string
		body         string
		status       int
		want         string
	}{
		{"400 malformed JSON", "POST", "/v2/serverless", "Bearer " + e.alice, "application/json", `{"name":`, 400,
			`{"title":"Bad Request","status":400,"detail":"the body is not valid JSON"}`},
		{"400 JSON nested too deep", "POST", "/v2/" + id + "/run", "Bearer " + e.alice, "application/json",
			`{"input":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, 400,
			`{"title":"Bad Request","status":400,"detail":"the body's JSON is nested too deep: arrays and objects may nest 10000 deep, and byte 10008 opens level 10001","error":"the body's JSON is nested too deep: arrays and objects may nest 10000 deep, and byte 10008 opens level 10001"}`},
		{"400 empty body", "POST", "/v2/serverless", "Bearer " + e.alice, "application/json", ``, 400,
			`{"title":"Bad Request","status":400,"detail":"a JSON body is required"}`},
		{"400 unparsable parameter", "GET", "/v2/serverless?limit=many", "Bearer " + e.alice, "", "", 400,
			`{"title":"Bad Request","status":400,"detail":"query.limit: cannot be parsed: invalid syntax","errors":["query.limit: cannot be parsed"]}`},
		{"401 no key", "GET", "/v2/serverless", "", "", "", 401,
			`{"title":"Unauthorized","status":401,"detail":"the API key is missing or malformed (expected \"Authorization: Bearer \u003cAPI_KEY\u003e\")"}`},
		{"401 unknown key", "GET", "/v2/serverless", "Bearer gk_nope", "", "", 401,
			`{"title":"Unauthorized","status":401,"detail":"the API key is not valid"}`},
		{"401 expired key", "GET", "/v2/serverless", "Bearer " + e.expired, "", "", 401,
			`{"title":"Unauthorized","status":401,"detail":"the API key expired at 2026-11-21T09:59:15Z"}`},
		{"401 on a job operation carries error", "GET", "/v2/" + id + "/health", "gk_nope", "", "", 401,
			`{"title":"Unauthorized","status":401,"detail":"the API key is not valid","error":"the API key is not valid"}`},
		{"403 scope", "POST", "/v2/serverless", "Bearer " + e.read, "application/json", minimalQueue, 403,
			`{"title":"Forbidden","status":403,"detail":"this key's scope \"read\" does not allow CreateEndpoint"}`},
		{"404 endpoint", "GET", "/v2/serverless/nope", "Bearer " + e.alice, "", "", 404,
			`{"title":"Not Found","status":404,"detail":"endpoint \"nope\" not found"}`},
		{"404 route", "GET", "/v3/anything", "Bearer " + e.alice, "", "", 404,
			`{"title":"Not Found","status":404,"detail":"no operation at /v3/anything"}`},
		{"405 method", "PUT", "/v2/serverless", "Bearer " + e.alice, "", "", 405,
			`{"title":"Method Not Allowed","status":405,"detail":"PUT is not allowed here; allowed: GET,POST"}`},
		{"413 body over the cap", "POST", "/v2/serverless", "Bearer " + e.alice, "application/json", big, 413,
			`{"title":"Request Entity Too Large","status":413,"detail":"the body is larger than this operation's limit of 1 MB"}`},
		{"415 content type", "POST", "/v2/serverless", "Bearer " + e.alice, "text/plain", minimalQueue, 415,
			`{"title":"Unsupported Media Type","status":415,"detail":"the body must be application/json, not \"text/plain\""}`},
		{"422 validation", "POST", "/v2/serverless", "Bearer " + e.alice, "application/json", with(`{"disk":0}`), 422,
			`{"title":"Unprocessable Entity","status":422,"detail":"$.disk: must be at least 1 (got 0)","errors":["$.disk: must be at least 1 (got 0)"]}`},
		{"422 unknown property", "POST", "/v2/serverless", "Bearer " + e.alice, "application/json", with(`{"extra":1}`), 422,
			`{"title":"Unprocessable Entity","status":422,"detail":"$.extra: unknown property","errors":["$.extra: unknown property"]}`},
		{"422 parameter", "GET", "/v2/serverless?limit=0", "Bearer " + e.alice, "", "", 422,
			`{"title":"Unprocessable Entity","status":422,"detail":"query.limit: must be at least 1 (got 0)","errors":["query.limit: must be at least 1 (got 0)"]}`},
		{"422 non-serverless template", "POST", "/v2/serverless", "Bearer " + e.alice, "application/json", with(`{"templateId":"tpl-pod"}`), 422,
			`{"title":"Unprocessable Entity","status":422,"detail":"$.templateId: template \"tpl-pod\" is not a serverless template","errors":["$.templateId: template \"tpl-pod\" is not a serverless template"]}`},
		{"404 job", "GET", "/v2/" + id + "/status/nope", e.alice, "", "", 404,
			`{"title":"Not Found","status":404,"detail":"job \"nope\" not found (unknown, or its result expired)","error":"job \"nope\" not found (unknown, or its result expired)"}`},
		{"422 job parameter", "POST", "/v2/" + id + "/runsync?wait=999", e.alice, "application/json", `{"input":{}}`, 422,
			`{"title":"Unprocessable Entity","status":422,"detail":"query.wait: must be at least 1000 (got 999)","errors":["query.wait: must be at least 1000 (got 999)"],"error":"query.wait: must be at least 1000 (got 999)"}`},
		{"422 input not an object", "POST", "/v2/" + id + "/run", e.alice, "application/json", `{"input":[1,2]}`, 422,
			`{"title":"Unprocessable Entity","status":422,"detail":"$.input: must be a JSON object","errors":["$.input: must be a JSON object"],"error":"$.input: must be a JSON object"}`},
		{"422 input missing", "POST", "/v2/" + id + "/run", e.alice, "application/json", `{"webhook":"http://x"}`, 422,
			`{"title":"Unprocessable Entity","status":422,"detail":"$.input: is required","errors":["$.input: is required"],"error":"$.input: is required"}`},
		{"422 job body", "POST", "/v2/" + id + "/run", e.alice, "application/json", `{"inputs":{}}`, 422,
			`{"title":"Unprocessable Entity","status":422,"detail":"$.inputs: unknown property","errors":["$.inputs: unknown property"],"error":"$.inputs: unknown property"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.doRaw(tc.method, tc.path, tc.auth, tc.ctype, tc.body)
			if r.status != tc.status || strings.TrimSpace(r.body) != tc.want {
				t.Errorf("%s %s =\n %d %s\nwant\n %d %s", tc.method, tc.path, r.status, r.body, tc.status, tc.want)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type = %q; want application/problem+json", ct)
			}
		})
	}
}

// TestRateLimits checks spec 8: headers on every authenticated response, 429 with Retry-After
// and the window named, windows reset, users independent.
func TestRateLimits(t *testing.T) {
	t.Parallel()
	e := setup(t, setupOpts{quota: core.Quota{Minute: 3, Hour: 100, Day: 1000}})
	for i := 1; i <= 3; i++ {
		r := e.as(e.alice, "GET", "/v2/serverless", "")
		if r.status != 200 {
			t.Fatalf("request %d = %d %s", i, r.status, r.body)
		}
		wantRL := `"minute";r=` + strconv.Itoa(3-i) + `;t=45, "hour";r=` + strconv.Itoa(100-i) + `;t=3585, "day";r=` + strconv.Itoa(1000-i) + `;t=50385`
		if got := r.header.Get("RateLimit"); got != wantRL {
			t.Errorf("request %d RateLimit = %q; want %q", i, got, wantRL)
		}
		if got, want := r.header.Get("RateLimit-Policy"), `"minute";q=3;w=60, "hour";q=100;w=3600, "day";q=1000;w=86400`; got != want {
			t.Errorf("RateLimit-Policy = %q; want %q", got, want)
		}
		if _, err := httpsfv.UnmarshalList([]string{r.header.Get("RateLimit")}); err != nil {
			t.Errorf("RateLimit is not an RFC 9651 list: %v", err)
		}
	}
	// A 403 and a 404 count too and carry the headers; the fourth request in the minute is 429.
	r := e.as(e.alice, "GET", "/v2/serverless", "")
	if r.status != 429 {
		t.Fatalf("4th request = %d; want 429", r.status)
	}
	if got := r.header.Get("Retry-After"); got != "45" {
		t.Errorf("Retry-After = %q; want 45", got)
	}
	if got := r.json(t)["detail"]; got != "rate limit exceeded: the minute window's quota is used up" {
		t.Errorf("detail = %q", got)
	}
	if r.header.Get("RateLimit") == "" {
		t.Errorf("429 without RateLimit")
	}
	// Another user is not affected; an unauthenticated request is not counted or limited.
	if r := e.as(e.bob, "GET", "/v2/serverless", ""); r.status != 200 {
		t.Errorf("bob = %d; want 200", r.status)
	}
	if r := e.do("GET", "/v2/serverless", "", ""); r.status != 401 || r.header.Get("RateLimit") != "" {
		t.Errorf("no key = %d with RateLimit %q; want 401 without", r.status, r.header.Get("RateLimit"))
	}
	// The next minute opens a new window.
	e.clock.Set(t0.Add(45 * time.Second))
	r = e.as(e.alice, "GET", "/v2/serverless", "")
	if r.status != 200 || !strings.HasPrefix(r.header.Get("RateLimit"), `"minute";r=2;t=60, "hour";r=96;`) {
		t.Errorf("next minute = %d RateLimit %q", r.status, r.header.Get("RateLimit"))
	}
}

// TestRateLimitExempt: a user whose quotas are all 0 gets no rate-limit headers.
func TestRateLimitExempt(t *testing.T) {
	t.Parallel()
	e := setup(t, setupOpts{quota: core.Quota{}})
	r := e.as(e.alice, "GET", "/v2/serverless", "")
	if r.status != 200 || r.header.Get("RateLimit") != "" || r.header.Get("RateLimit-Policy") != "" {
		t.Errorf("exempt = %d RateLimit %q; want 200 without headers", r.status, r.header.Get("RateLimit"))
	}
}

// TestUnauthorizedWording: a missing or malformed key gets one wording on management and job
// routes alike.
func TestUnauthorizedWording(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create(minimalQueue)
	const detail = `the API key is missing or malformed (expected "Authorization: Bearer <API_KEY>")`
	for _, path := range []string{"/v2/serverless", "/v2/" + id + "/health"} {
		for _, auth := range []string{"", "Bearer", "bearer", "Bearer gk_" + strings.Repeat("x", 300)} {
			r := e.do("GET", path, auth, "")
			if r.status != 401 || r.json(t)["detail"] != detail {
				t.Errorf("GET %s with Authorization %.20q = %d %s; want 401 %s", path, auth, r.status, r.body, detail)
			}
		}
	}
}

// downLimiter is a rate limiter whose store is unreachable.
type downLimiter struct{}

func (downLimiter) Allow(context.Context, string, core.Quota, time.Time) (core.Decision, error) {
	return core.Decision{}, errors.New("the rate-limit store is unreachable")
}

// TestRateLimiterDownRefuses checks that a request the limiter cannot count is refused with a
// retryable 503 problem, not served uncounted.
func TestRateLimiterDownRefuses(t *testing.T) {
	t.Parallel()
	e := setup(t, setupOpts{quota: core.Quota{Minute: 3}, limiter: downLimiter{}})
	r := e.as(e.alice, "POST", "/v2/serverless", minimalQueue)
	if r.status != 503 || r.header.Get("Retry-After") != "1" || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("request with the limiter down = %d, Retry-After %q, Content-Type %q; want 503, 1, application/problem+json",
			r.status, r.header.Get("Retry-After"), r.header.Get("Content-Type"))
	}
	if got, want := r.json(t)["detail"], "the rate limiter cannot count this request now; retry in a second"; got != want {
		t.Errorf("detail = %q; want %q", got, want)
	}
	if r.header.Get("RateLimit") != "" {
		t.Errorf("RateLimit = %q; want none: nothing was counted", r.header.Get("RateLimit"))
	}
}
