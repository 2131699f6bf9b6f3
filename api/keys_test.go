package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
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

// TestKeyChildrenEndWithTheirParent: a key made with a key expires no later than it, and is
// revoked with it (and so are the keys made with those); a key whose ancestor is gone or has
// expired is refused whatever its own expiry says; and a chain of keys has a bounded length.
func TestKeyChildrenEndWithTheirParent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	type made struct {
		ID, Secret string
		ExpiresAt  *time.Time
	}
	mint := func(with, body string) made {
		t.Helper()
		r := e.as(with, "POST", "/v2/keys", body)
		if r.status != 201 {
			t.Fatalf("create key %s = %d %s; want 201", body, r.status, r.body)
		}
		var m made
		if err := json.Unmarshal([]byte(r.body), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	works := func(name, secret string, want int) {
		t.Helper()
		if r := e.as(secret, "GET", "/v2/serverless", ""); r.status != want {
			t.Errorf("%s: GET /v2/serverless = %d %s; want %d", name, r.status, r.body, want)
		}
	}
	parentEnd := t0.Add(time.Hour)
	parent := mint(e.alice, `{"expiresIn":3600}`)
	for _, tc := range []struct{ name, body string }{
		{"a longer expiry", `{"expiresIn":7200}`},
		{"no expiry", `{}`},
	} {
		if c := mint(parent.Secret, tc.body); c.ExpiresAt == nil || !c.ExpiresAt.Equal(parentEnd) {
			t.Errorf("child asking for %s expires at %v; want the parent's %v", tc.name, c.ExpiresAt, parentEnd)
		}
	}
	if c := mint(parent.Secret, `{"expiresIn":60}`); c.ExpiresAt == nil || !c.ExpiresAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("child asking for a shorter expiry expires at %v; want its own %v", c.ExpiresAt, t0.Add(time.Minute))
	}
	child := mint(parent.Secret, `{}`)
	grandchild := mint(child.Secret, `{"scope":"read"}`)
	sibling := mint(e.alice, `{}`) // made with alice's own key: not the parent's
	works("grandchild", grandchild.Secret, 200)

	// Revoking the parent revokes every key made with it, and the keys made with those.
	if r := e.as(e.alice, "DELETE", "/v2/keys/"+parent.ID, ""); r.status != 204 {
		t.Fatalf("revoke the parent = %d %s; want 204", r.status, r.body)
	}
	works("child of a revoked key", child.Secret, 401)
	works("grandchild of a revoked key", grandchild.Secret, 401)
	works("a key made beside it", sibling.Secret, 200)
	r := e.as(e.alice, "GET", "/v2/keys", "")
	for _, gone := range []string{parent.ID, child.ID, grandchild.ID} {
		if strings.Contains(r.body, gone) {
			t.Errorf("key list after revoking the parent holds %s: %s", gone, r.body)
		}
	}

	// A key whose ancestor is gone (revoked while it was being made) or expired is refused,
	// whatever its own record says.
	put := func(k core.Key) {
		t.Helper()
		if err := e.keys.PutKey(context.Background(), k); err != nil {
			t.Fatal(err)
		}
	}
	past := t0.Add(-time.Second)
	expiredParent := core.Key{ID: "key_expiredparent", Hash: core.HashKey("gk_expired_parent"), User: "alice", Scope: core.ScopeAll, ExpiresAt: &past}
	put(expiredParent)
	orphan, ofExpired := core.NewKeySecret(), core.NewKeySecret()
	put(core.Key{ID: "key_orphan", Hash: core.HashKey(orphan), User: "alice", Scope: core.ScopeAll, Ancestors: []string{core.HashKey("gk_gone")}})
	put(core.Key{ID: "key_ofexpired", Hash: core.HashKey(ofExpired), User: "alice", Scope: core.ScopeAll, Ancestors: []string{expiredParent.Hash}})
	for _, tc := range []struct{ name, secret, want string }{
		{"a key whose parent is gone", orphan, "a key it was made with has been revoked"},
		{"a key whose parent expired", ofExpired, "expired at " + past.Format(time.RFC3339) + ", with the key key_expiredparent"},
	} {
		if r := e.as(tc.secret, "GET", "/v2/serverless", ""); r.status != 401 || !strings.Contains(r.body, tc.want) {
			t.Errorf("%s: %d %s; want 401 saying %q", tc.name, r.status, r.body, tc.want)
		}
	}

	// A chain holds at most core.MaxKeyAncestors keys above the last one.
	link := e.alice
	for range core.MaxKeyAncestors {
		link = mint(link, `{}`).Secret
	}
	if r := e.as(link, "POST", "/v2/keys", `{}`); r.status != 403 || !strings.Contains(r.body, "the most a chain may hold") {
		t.Errorf("create a key at the end of the longest chain = %d %s; want 403", r.status, r.body)
	}
	works("the last key of the longest chain", link, 200)
}

// TestExpiredKeysLeaveTheList: an expired key stays listed for the grace period (7 days by
// default), so that its owner sees it expired, and then leaves the list and the store.
func TestExpiredKeysLeaveTheList(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.as(e.alice, "POST", "/v2/keys", `{"expiresIn":60}`)
	if r.status != 201 {
		t.Fatalf("create key = %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	listed := func(when string, want bool) {
		t.Helper()
		r := e.as(e.alice, "GET", "/v2/keys", "")
		if r.status != 200 || strings.Contains(r.body, id) != want {
			t.Errorf("key list %s = %d %s; want %s listed: %v", when, r.status, r.body, id, want)
		}
	}
	e.clock.Advance(time.Minute)
	listed("as it expires", true)
	e.clock.Advance(core.DefaultExpiredKeyGrace - time.Second)
	listed("a second short of the grace period", true)
	e.clock.Advance(2 * time.Second)
	listed("past the grace period", false)
	keys, err := e.keys.ListKeys(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.ID == id || k.ExpiresAt != nil {
			t.Errorf("store after the list still holds %s (expires %v); want the expired keys deleted", k.ID, k.ExpiresAt)
		}
	}
}
