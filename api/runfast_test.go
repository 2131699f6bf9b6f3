package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A plain run is answered beside the generated server (runfast.go); the same request with a
// Content-Type it hands on ("; charset=utf-8") is answered by the generated server. Both must
// give the same answers, accepted or refused.
func TestRunAnswersAsTheGeneratedServerDoes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create(minimalQueue)
	cases := []struct {
		name, path, key, body string
	}{
		{"accepted", "/v2/" + id + "/run", e.alice, `{"input":{"prompt":"hi"}}`},
		{"accepted with a policy and webhook-free options", "/v2/" + id + "/run", e.jobs, `{"input":{"a":[1,2]},"policy":{"ttl":60000,"executionTimeout":5000,"lowPriority":true}}`},
		{"input not an object", "/v2/" + id + "/run", e.alice, `{"input":[1]}`},
		{"no input", "/v2/" + id + "/run", e.alice, `{"webhook":"https://example.com/x"}`},
		{"a bad policy", "/v2/" + id + "/run", e.alice, `{"input":{},"policy":{"ttl":"soon"}}`},
		{"an unknown endpoint", "/v2/nosuchendpoint/run", e.alice, `{"input":{}}`},
		{"another user's endpoint", "/v2/" + id + "/run", e.bob, `{"input":{}}`},
		{"a read-only key", "/v2/" + id + "/run", e.read, `{"input":{}}`},
		{"a webhook to a private address", "/v2/" + id + "/run", e.alice, `{"input":{},"webhook":"http://127.0.0.1/hook"}`},
	}
	for _, c := range cases {
		fast := e.doRaw("POST", c.path, "Bearer "+c.key, "application/json", c.body)
		gen := e.doRaw("POST", c.path, "Bearer "+c.key, "application/json; charset=utf-8", c.body)
		if fast.status != gen.status {
			t.Errorf("%s: status %d; the generated server's %d (%s)", c.name, fast.status, gen.status, gen.body)
			continue
		}
		for _, h := range []string{"Content-Type", "Access-Control-Expose-Headers", "Retry-After"} {
			if f, g := fast.header.Get(h), gen.header.Get(h); f != g {
				t.Errorf("%s: %s %q; the generated server's %q", c.name, h, f, g)
			}
		}
		for _, h := range []string{"RateLimit", "RateLimit-Policy"} {
			if f, g := fast.header.Get(h) != "", gen.header.Get(h) != ""; f != g {
				t.Errorf("%s: %s set %v; the generated server's %v", c.name, h, f, g)
			}
		}
		if fast.status == http.StatusOK {
			var f, g map[string]any
			if json.Unmarshal([]byte(fast.body), &f) != nil || json.Unmarshal([]byte(gen.body), &g) != nil || len(f) != len(g) || f["status"] != g["status"] || len(f["id"].(string)) != len(g["id"].(string)) {
				t.Errorf("%s: body %s; the generated server's %s", c.name, fast.body, gen.body)
			}
			continue
		}
		if fast.body != gen.body {
			t.Errorf("%s: body %s; the generated server's %s", c.name, fast.body, gen.body)
		}
	}
}

// A durable run costs few allocations: the generated server's wrapper (a span, attribute
// sets, a status recorder, its parameter and header coders) cost as many again as the run.
// Not parallel: it counts allocations.
func TestRunAllocatesLittle(t *testing.T) {
	e := setup(t)
	id := e.create(minimalQueue)
	allocs := func(ctype string) float64 {
		return testing.AllocsPerRun(200, func() {
			r := httptest.NewRequest("POST", "/v2/"+id+"/run", strings.NewReader(`{"input":{"prompt":"hi"}}`))
			r.Header.Set("Content-Type", ctype)
			r.Header.Set("Authorization", "Bearer "+e.alice)
			w := httptest.NewRecorder()
			e.api.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				t.Fatalf("run = %d %s", w.Code, w.Body)
			}
		})
	}
	fast, gen := allocs("application/json"), allocs("application/json; charset=utf-8")
	t.Logf("allocations per run: %.0f, through the generated server %.0f", fast, gen)
	if fast > 0.8*gen {
		t.Errorf("a run allocates %.0f times; want at most 0.8x the %.0f of the generated server's path", fast, gen)
	}
}
