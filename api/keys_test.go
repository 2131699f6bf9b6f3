package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestKeysOverTheAPI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := e.create(minimalQueue)

	// A new key's secret is in the answer once, works at once, and is stored only as a hash.
	r := e.as(e.alice, "POST", "/v2/keys", fmt.Sprintf(`{"scope":"jobs","endpoints":[%q],"expiresIn":3600}`, ep))
	if r.status != 201 {
		t.Fatalf("create key = %d %s; want 201", r.status, r.body)
	}
	var created struct {
		ID, User, Scope, Secret string
		Endpoints               []string
		ExpiresAt               time.Time
	}
	if err := json.Unmarshal([]byte(r.body), &created); err != nil {
		t.Fatal(err)
	}
	if created.User != "alice" || created.Scope != "jobs" || !strings.HasPrefix(created.Secret, "gk_") ||
		len(created.Endpoints) != 1 || created.Endpoints[0] != ep || !created.ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("created key = %+v; want alice's jobs key on %s expiring at %v", created, ep, t0.Add(time.Hour))
	}
	if r := e.do("POST", "/v2/"+ep+"/run", created.Secret, `{"input":{}}`); r.status != 200 {
		t.Errorf("run with the new key = %d %s; want 200", r.status, r.body)
	}
	if r := e.as(created.Secret, "GET", "/v2/keys", ""); r.status != 403 {
		t.Errorf("list keys with a jobs key = %d; want 403 (only an all key manages keys)", r.status)
	}
	if r := e.as(e.read, "POST", "/v2/keys", `{}`); r.status != 403 {
		t.Errorf("create key with a read key = %d; want 403", r.status)
	}

	// The list is the user's own keys, oldest first, without secrets or hashes.
	r = e.as(e.alice, "GET", "/v2/keys", "")
	if r.status != 200 || strings.Contains(r.body, created.Secret) || strings.Contains(r.body, `"hash"`) {
		t.Fatalf("list keys = %d %s; want 200 without secrets or hashes", r.status, r.body)
	}
	items := r.json(t)["items"].([]any)
	if n := len(items); n != 5 || items[n-1].(map[string]any)["id"] != created.ID {
		t.Errorf("alice's keys = %v; want her 4 keys and the new one last", items)
	}
	if r := e.as(e.bob, "GET", "/v2/keys", ""); len(r.json(t)["items"].([]any)) != 1 {
		t.Errorf("bob's keys = %s; want his one", r.body)
	}

	// Revoking: another user's key is not found; the own key stops working.
	if r := e.as(e.bob, "DELETE", "/v2/keys/"+created.ID, ""); r.status != 404 {
		t.Errorf("bob deletes alice's key = %d %s; want 404", r.status, r.body)
	}
	if r := e.as(e.alice, "DELETE", "/v2/keys/"+created.ID, ""); r.status != 204 {
		t.Fatalf("delete key = %d %s; want 204", r.status, r.body)
	}
	if r := e.do("POST", "/v2/"+ep+"/run", created.Secret, `{"input":{}}`); r.status != 401 {
		t.Errorf("run with the revoked key = %d %s; want 401", r.status, r.body)
	}
	if r := e.as(e.alice, "DELETE", "/v2/keys/"+created.ID, ""); r.status != 404 {
		t.Errorf("delete a revoked key again = %d; want 404", r.status)
	}

	// Bad requests say what is wrong and where.
	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"endpoints without scope jobs", `{"scope":"all","endpoints":["x"]}`, 422, "$.endpoints: applies only with scope jobs"},
		{"an unknown endpoint", `{"scope":"jobs","endpoints":["nope"]}`, 422, `$.endpoints[0]: user alice has no endpoint \"nope\"`},
		{"the second of two endpoints unknown", `{"scope":"jobs","endpoints":["` + e.create(minimalQueue) + `","x"]}`, 422, `$.endpoints[1]`},
		{"an unknown scope", `{"scope":"root"}`, 422, "scope"},
		{"a zero expiry", `{"expiresIn":0}`, 422, "expiresIn"},
		{"an unknown field", `{"secret":"gk_mine"}`, 422, "secret"},
		{"a raised quota", `{"quota":{"minute":5000}}`, 403, "$.quota.minute: 5000 would raise the user's quota of 1000"},
		{"an unlimited quota", `{"quota":{"day":0}}`, 403, "$.quota.day"},
		{"not JSON", `{`, 400, "JSON"},
	} {
		if r := e.as(e.alice, "POST", "/v2/keys", tc.body); r.status != tc.status || !strings.Contains(r.body, tc.want) {
			t.Errorf("%s: %d %s; want %d naming %q", tc.name, r.status, r.body, tc.status, tc.want)
		}
	}
	// A lowered quota applies to the user at once.
	if r := e.as(e.alice, "POST", "/v2/keys", `{"quota":{"minute":900}}`); r.status != 201 {
		t.Fatalf("create key lowering the quota = %d %s", r.status, r.body)
	}
	if r := e.as(e.alice, "GET", "/v2/keys", ""); !strings.Contains(r.header.Get("RateLimit-Policy"), `"minute";q=900`) {
		t.Errorf("RateLimit-Policy after lowering = %q; want minute q=900", r.header.Get("RateLimit-Policy"))
	}
}

func TestKeyManagementIsRateLimited(t *testing.T) {
	t.Parallel()
	e := setup(t)
	refused := 0
	for range 40 {
		r := e.as(e.bob, "GET", "/v2/keys", "")
		if r.status == 429 {
			refused++
			if !strings.Contains(r.body, "key management rate limit") || r.header.Get("Retry-After") == "" {
				t.Errorf("429 = %s (Retry-After %q); want the key management limit named and Retry-After", r.body, r.header.Get("Retry-After"))
			}
		}
	}
	if refused != 10 {
		t.Errorf("%d of 40 key calls in a minute refused; want 10 (30 a minute allowed)", refused)
	}
	if r := e.as(e.bob, "GET", "/v2/serverless", ""); r.status != 200 {
		t.Errorf("other calls after the key limit = %d; want 200 (the user's own quota is not used up)", r.status)
	}
}
