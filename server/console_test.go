package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/console"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
)

// The server serves the web console at / with its CSP; other methods and unknown paths stay
// the API's problem+json answers.
func TestConsoleAtRoot(t *testing.T) {
	t.Parallel()
	s := servertest.New(t, server.Config{}, server.Options{Tick: time.Hour})
	resp, err := http.Get(s.URL() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Security-Policy") != console.CSP || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("GET / = %d %v; want 200 text/html with the console's CSP", resp.StatusCode, resp.Header)
	}
	for _, c := range []struct{ method, path string }{{"POST", "/"}, {"GET", "/console/nope.js"}} {
		code, body := servertest.Call(t, c.method, s.URL()+c.path, "", "")
		if code < 400 || !strings.Contains(body, `"status"`) {
			t.Errorf("%s %s = %d %s; want a problem+json refusal", c.method, c.path, code, body)
		}
	}
}
