package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPrintable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain text, ünïcödé ✓":   "plain text, ünïcödé ✓",
		"a\tb":                    "a\tb",
		"\x1b[2J\x1b]0;pwned\x07": `\x1b[2J\x1b]0;pwned\x07`,
		"nul\x00 del\x7f":         `nul\x00 del\x7f`,
		"c1 \u009b31m \u0085":     `c1 \u009b31m \u0085`,
		"cr\rlf\n":                `cr\x0dlf\x0a`,
		"bad \xff\xc2 utf8":       `bad \xff\xc2 utf8`,
		"real \uFFFD stays":       "real \uFFFD stays",
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q; want %q", in, got, want)
		}
	}
	if got := string(jsonControls([]byte("{\"a\": \"x\u009by\x7f\xff\"}\n"))); got != "{\"a\": \"x\\u009by\\u007f\\ufffd\"}\n" {
		t.Errorf("jsonControls = %q", got)
	}
}

// hostile answers the CLI's calls with text that tries to drive a terminal: an endpoint name
// with ESC and C1 controls, worker log lines with escape sequences, a problem detail with ESC.
func hostile(t *testing.T) string {
	const name = `evil\u001b]0;pwned\u0007\u001b[2J` + "\u009b31m"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/serverless", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"items":[{"id":"ep1","name":"` + name + `","type":"QUEUE","image":"img\u001b[31m","workers":{"min":0,"max":1},` +
			`"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"dataCenterIds":[],"networkVolumes":[],"timeout":600000,` +
			`"flashboot":"OFF","allowedCudaVersions":[],"createdAt":"2026-11-27T00:00:00Z"}]}`))
	})
	mux.HandleFunc("GET /v2/serverless/ep1/workers/w1/logs", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("starting\tok\n\x1b]0;pwned\x07\x1b[2Jcleared\n\x9b31mred\r\n"))
	})
	mux.HandleFunc("GET /v2/serverless/ep2", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"type":"about:blank","title":"Not Found","status":404,"detail":"no endpoint \u001b[2J here","errors":["line \u001b[31m"]}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestCLIEscapesServerText: what the CLI prints from the server (names in tables, JSON and
// YAML, worker log lines, problem details) holds no raw control character: ESC shows as
// \x1b (or \u001b in JSON), the C1 CSI as \u009b; tabs in log lines stay.
func TestCLIEscapesServerText(t *testing.T) {
	t.Parallel()
	u := hostile(t)
	r := &rig{t: t, home: t.TempDir(), hc: &http.Client{Transport: &http.Transport{}}}
	t.Cleanup(r.hc.CloseIdleConnections)
	env := map[string]string{"HOME": r.home, "GANTRY_URL": u, "GANTRY_KEY": "gk_test"}
	raw := func(s string) bool { return strings.ContainsAny(s, "\x1b\x07\r") || strings.Contains(s, "\x9b") }
	check := func(name string, res result, wantCode int, want ...string) {
		t.Helper()
		if res.code != wantCode {
			t.Errorf("%s: %v; want exit %d", name, res, wantCode)
		}
		if raw(res.out) || raw(res.err) {
			t.Errorf("%s: raw control characters in the output: %q / %q", name, res.out, res.err)
		}
		for _, w := range want {
			if !strings.Contains(res.out+res.err, w) {
				t.Errorf("%s: output %q / %q; want %q in it", name, res.out, res.err, w)
			}
		}
	}
	check("endpoint list", r.runWith(env, "", "endpoint", "list"), 0, `evil\x1b]0;pwned\x07\x1b[2J\u009b31m`, `img\x1b[31m`)
	check("endpoint list -o json", r.runWith(env, "", "endpoint", "list", "-o", "json"), 0, `evil\u001b]0;pwned\u0007\u001b[2J\u009b31m`)
	check("endpoint list -o yaml", r.runWith(env, "", "endpoint", "list", "-o", "yaml"), 0, `evil\e]0;pwned\a\e[2J`)
	check("worker logs", r.runWith(env, "", "worker", "logs", "ep1", "w1"), 0,
		"starting\tok\n", `\x1b]0;pwned\x07\x1b[2Jcleared`, `\x9b31mred`+"\n")
	check("a problem", r.runWith(env, "", "endpoint", "get", "ep2"), exitFailed, `no endpoint \x1b[2J here`, `line \x1b[31m`)
}
