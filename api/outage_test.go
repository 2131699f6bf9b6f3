package api_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api"
	"github.com/gantryhq/gantry/core"
)

// errStoreDown is what a store returns while it cannot be reached.
var errStoreDown = errors.New("looking up a key: dial tcp 10.9.8.7:5432: connect: connection refused")

// outageKeys is a key store that fails every call while down is set, as PostgreSQL's does in
// an outage.
type outageKeys struct {
	core.KeyStore
	down *atomic.Bool
}

func (o outageKeys) LookupKey(ctx context.Context, hash string) (core.Key, error) {
	if o.down.Load() {
		return core.Key{}, errStoreDown
	}
	return o.KeyStore.LookupKey(ctx, hash)
}

func (o outageKeys) GetUser(ctx context.Context, name string) (core.User, error) {
	if o.down.Load() {
		return core.User{}, errStoreDown
	}
	return o.KeyStore.GetUser(ctx, name)
}

// outageLimiter is the in-memory limiter, failing while down is set.
type outageLimiter struct {
	core.RateLimiter
	down *atomic.Bool
}

func (o *outageLimiter) Allow(ctx context.Context, user string, q core.Quota, now time.Time) (core.Decision, error) {
	if o.down.Load() {
		return core.Decision{}, errStoreDown
	}
	return o.RateLimiter.Allow(ctx, user, q, now)
}

// TestStoreOutageOneStatus: while the store is down, a request whose key cannot be looked up
// gets what a request the rate limiter cannot count gets: 503 problem+json with Retry-After 1,
// on every kind of route, never 500; and the store's error is not shown.
func TestStoreOutageOneStatus(t *testing.T) {
	t.Parallel()
	var keysDown, limiterDown atomic.Bool
	e := setup(t, setupOpts{quota: core.Quota{Minute: 1000},
		keyStore: func(k core.KeyStore) core.KeyStore { return outageKeys{k, &keysDown} },
		limiter:  &outageLimiter{down: &limiterDown}})
	ep := e.create(minimalQueue)
	lb := e.create(minimalLB)
	routes := []struct{ method, path, body string }{
		{"GET", "/v2/serverless", ""},
		{"POST", "/v2/" + ep + "/run", `{"input":{}}`},
		{"POST", "/v2/" + ep + "/runsync", `{"input":{}}`},
		{"GET", "/v2/" + ep + "/status/some-job", ""},
		{"GET", "/v2/keys", ""},
		{"GET", api.LBPrefix + lb + "/x", ""},
	}
	for _, outage := range []struct {
		name         string
		keys, limits bool
		detail       string
	}{
		{"the key store down", true, false, "the store cannot answer now; retry in a second"},
		{"the limiter's store down", false, true, "the rate limiter cannot count this request now"},
		{"both down", true, true, "the store cannot answer now; retry in a second"},
	} {
		keysDown.Store(outage.keys)
		limiterDown.Store(outage.limits)
		for _, rt := range routes {
			for _, key := range []string{e.alice, "gk_never_seen_before"} {
				r := e.as(key, rt.method, rt.path, rt.body)
				if key != e.alice && !outage.keys {
					continue // an unknown key is 401 while the key store answers
				}
				if r.status != 503 || r.header.Get("Retry-After") != "1" || r.header.Get("Content-Type") != "application/problem+json" ||
					!strings.Contains(r.body, outage.detail) || strings.Contains(r.body, "refused") {
					t.Errorf("%s: %s %s = %d (Retry-After %q, %s) %s; want 503 problem+json, Retry-After 1, saying %q and not the store's error",
						outage.name, rt.method, rt.path, r.status, r.header.Get("Retry-After"), r.header.Get("Content-Type"), r.body, outage.detail)
				}
			}
		}
	}
	keysDown.Store(false)
	limiterDown.Store(false)
	if r := e.as(e.alice, "GET", "/v2/serverless", ""); r.status != 200 {
		t.Errorf("after the outage GET /v2/serverless = %d %s; want 200", r.status, r.body)
	}
}

// TestHealthzTellsTheStoreIsDown: /healthz answers 503 problem+json with Retry-After while the
// store check fails, on a replica that leads and on one that does not; a storm of probes
// checks the store at most once a second; and it answers 200 again once the store does.
func TestHealthzTellsTheStoreIsDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		leader func() (bool, string, string)
	}{
		{"leader", nil},
		{"follower", func() (bool, string, string) { return false, "replica-b", "http://127.0.0.1:1" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var down atomic.Bool
			var checks atomic.Int64
			e := setup(t, setupOpts{quota: core.Quota{Minute: 1000}, leader: tc.leader,
				storeCheck: func(ctx context.Context) error {
					checks.Add(1)
					if _, ok := ctx.Deadline(); !ok {
						t.Error("the store check's context has no deadline")
					}
					if down.Load() {
						return errStoreDown
					}
					return nil
				}})
			healthz := func(method string) response { return e.do(method, "/healthz", "", "") }
			if r := healthz("GET"); r.status != 200 {
				t.Fatalf("GET /healthz with the store up = %d %s; want 200", r.status, r.body)
			}
			down.Store(true)
			e.clock.Advance(api.StoreCheckTTL) // the last answer is a second old: check again
			n := checks.Load()
			var wg sync.WaitGroup
			for range 50 {
				wg.Go(func() {
					r := healthz("GET")
					if r.status != 503 || r.header.Get("Retry-After") != "1" || r.header.Get("Content-Type") != "application/problem+json" ||
						!strings.Contains(r.body, "the store cannot be reached") || strings.Contains(r.body, "refused") {
						t.Errorf("GET /healthz with the store down = %d (Retry-After %q) %s; want 503 problem+json, Retry-After 1, without the store's error",
							r.status, r.header.Get("Retry-After"), r.body)
					}
				})
			}
			wg.Wait()
			if r := healthz("HEAD"); r.status != 503 {
				t.Errorf("HEAD /healthz with the store down = %d; want 503", r.status)
			}
			if got := checks.Load() - n; got != 1 {
				t.Errorf("51 probes within a second checked the store %d times; want 1", got)
			}
			down.Store(false)
			if r := healthz("GET"); r.status != 503 {
				t.Errorf("GET /healthz within a second of a failed check = %d; want the kept 503", r.status)
			}
			e.clock.Advance(api.StoreCheckTTL)
			if r := healthz("GET"); r.status != 200 {
				t.Errorf("GET /healthz once the store answers again = %d %s; want 200", r.status, r.body)
			}
		})
	}
}

// TestLivezIgnoresTheStore: /livez, the liveness probe's route, answers 200 while the store is
// down and while the server drains, when /healthz answers 503; other methods get 405.
func TestLivezIgnoresTheStore(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	e := setup(t, setupOpts{quota: core.Quota{Minute: 1000},
		storeCheck: func(context.Context) error {
			if down.Load() {
				return errStoreDown
			}
			return nil
		}})
	down.Store(true)
	if r := e.do("GET", "/healthz", "", ""); r.status != 503 {
		t.Fatalf("GET /healthz with the store down = %d; want 503", r.status)
	}
	for _, m := range []string{"GET", "HEAD"} {
		if r := e.do(m, "/livez", "", ""); r.status != 200 {
			t.Errorf("%s /livez with the store down = %d %s; want 200", m, r.status, r.body)
		}
	}
	e.api.Drain()
	if r := e.do("GET", "/livez", "", ""); r.status != 200 {
		t.Errorf("GET /livez while draining = %d %s; want 200", r.status, r.body)
	}
	if r := e.do("POST", "/livez", "", ""); r.status != 405 || r.header.Get("Allow") != api.HeadAllow {
		t.Errorf("POST /livez = %d (Allow %q); want 405, Allow %q", r.status, r.header.Get("Allow"), api.HeadAllow)
	}
}
