package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestWorkerEnvRefused: env names that change how a worker's program is loaded or run
// (LD_PRELOAD, the PYTHONWARNINGS + BROWSER chain of issue 29, GODEBUG, ...) are refused with a
// 422 problem naming the field and the name, on endpoint and template create and update; the
// names that load nothing still pass.
func TestWorkerEnvRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := e.create(minimalQueue)
	r := e.as(e.alice, "POST", "/v2/templates", `{"name":"t","image":"img:1"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("template create = %d %s", r.status, r.body)
	}
	tpl := r.json(t)["id"].(string)

	attack := `{"PYTHONWARNINGS":"ignore::antigravity.x","BROWSER":"/bin/sh -c \"id > /tmp/p\" #%s"}`
	for _, tc := range []struct {
		name string
		env  string
		want []string // the problem's errors, in order
	}{
		{"LD_PRELOAD", `{"LD_PRELOAD":"/tmp/x.so"}`, []string{"$.env.LD_PRELOAD: LD_PRELOAD is refused: the dynamic loader reads it"}},
		{"lower case", `{"ld_library_path":"/tmp"}`, []string{"$.env.ld_library_path: ld_library_path is refused"}},
		{"antigravity", attack, []string{"$.env.BROWSER: BROWSER is refused: Python's webbrowser module runs it", "$.env.PYTHONWARNINGS: PYTHONWARNINGS is refused: Python reads it"}},
		{"GODEBUG", `{"GODEBUG":"x509sha1=1"}`, []string{"$.env.GODEBUG: GODEBUG is refused"}},
		{"NODE_OPTIONS", `{"NODE_OPTIONS":"--require /tmp/x.js"}`, []string{"$.env.NODE_OPTIONS: NODE_OPTIONS is refused"}},
		{"BASH_ENV", `{"BASH_ENV":"/tmp/x"}`, []string{"$.env.BASH_ENV: BASH_ENV is refused"}},
		{"bash function", `{"BASH_FUNC_ls__":"() { id; }"}`, []string{"$.env.BASH_FUNC_ls__: BASH_FUNC_ls__ is refused"}},
		{"PYTHONPATH", `{"PYTHONPATH":"/tmp"}`, []string{"$.env.PYTHONPATH: PYTHONPATH is refused"}},
		{"GCONV_PATH", `{"GCONV_PATH":"/tmp"}`, []string{"$.env.GCONV_PATH: GCONV_PATH is refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, req := range []struct{ method, path, body string }{
				{"POST", "/v2/serverless", with(`{"env":` + tc.env + `}`)},
				{"PATCH", "/v2/serverless/" + ep, `{"env":` + tc.env + `}`},
				{"POST", "/v2/templates", `{"name":"t","image":"img:1","env":` + tc.env + `}`},
				{"PATCH", "/v2/templates/" + tpl, `{"env":` + tc.env + `}`},
			} {
				r := e.as(e.alice, req.method, req.path, req.body)
				if r.status != http.StatusUnprocessableEntity || r.header.Get("Content-Type") != "application/problem+json" {
					t.Errorf("%s %s with env %s = %d %s; want a 422 problem", req.method, req.path, tc.env, r.status, r.body)
					continue
				}
				got := r.errors(t)
				if len(got) != len(tc.want) {
					t.Errorf("%s %s: errors %q; want %d starting %q", req.method, req.path, got, len(tc.want), tc.want)
					continue
				}
				for i, w := range tc.want {
					if !strings.HasPrefix(got[i], w) || !strings.Contains(got[i], "docs/worker-env.md") {
						t.Errorf("%s %s: error %q; want it to start %q and point to docs/worker-env.md", req.method, req.path, got[i], w)
					}
				}
			}
		})
	}

	// Names that only tune a program, and Gantry's own knobs, pass.
	ok := `{"PYTHONUNBUFFERED":"1","PYTHONHASHSEED":"0","PATH":"/usr/bin:/bin","HOME":"/tmp","GOMAXPROCS":"2","GANTRY_CONCURRENCY":"2","MODEL":"small"}`
	if r := e.as(e.alice, "POST", "/v2/serverless", with(`{"env":`+ok+`}`)); r.status != http.StatusCreated {
		t.Errorf("create with env %s = %d %s; want 201", ok, r.status, r.body)
	}
	if r := e.as(e.alice, "PATCH", "/v2/templates/"+tpl, `{"env":`+ok+`}`); r.status != http.StatusOK {
		t.Errorf("template update with env %s = %d %s; want 200", ok, r.status, r.body)
	}
	if r := e.as(e.alice, "GET", "/v2/serverless/"+ep, ""); strings.Contains(r.body, "LD_PRELOAD") || strings.Contains(r.body, "BROWSER") {
		t.Errorf("the endpoint after refused updates: %s; want its env unchanged", r.body)
	}
}
