package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/console"
)

// next stands for the API: it answers what the console does not serve.
var next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusTeapot)
})

func TestHandlerServesThePageAndAssets(t *testing.T) {
	t.Parallel()
	h := console.Handler(next)
	for _, c := range []struct {
		method, path string
		code         int
		typ          string
	}{
		{"GET", "/", 200, "text/html"},
		{"HEAD", "/", 200, "text/html"},
		{"GET", "/console/app.js", 200, "text/javascript"},
		{"GET", "/console/style.css", 200, "text/css"},
		{"GET", "/console/charts.js", 200, "text/javascript"},
		{"GET", "/console/index.html", 418, ""}, // the page is at / only
		{"GET", "/console/missing.js", 418, ""},
		{"GET", "/console/", 418, ""},
		{"POST", "/", 418, ""},
		{"GET", "/v2/serverless", 418, ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		if rec.Code != c.code || !strings.HasPrefix(rec.Header().Get("Content-Type"), c.typ) {
			t.Errorf("%s %s = %d %s; want %d %s", c.method, c.path, rec.Code, rec.Header().Get("Content-Type"), c.code, c.typ)
		}
		if c.code == 200 {
			if got := rec.Header().Get("Content-Security-Policy"); got != console.CSP {
				t.Errorf("%s %s: Content-Security-Policy = %q; want %q", c.method, c.path, got, console.CSP)
			}
			if rec.Header().Get("X-Content-Type-Options") != "nosniff" || rec.Header().Get("Referrer-Policy") != "no-referrer" {
				t.Errorf("%s %s: headers %v; want nosniff and no-referrer", c.method, c.path, rec.Header())
			}
		}
	}
}

// The page loads only its own module and stylesheet: no inline script or style, nothing from
// another origin.
func TestPageHasNoInlineCode(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	console.Handler(next).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	page, _ := io.ReadAll(rec.Body)
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`), // a script with a body
		regexp.MustCompile(`\son[a-z]+=`),                   // an inline handler
		regexp.MustCompile(`<style|\sstyle=`),
		regexp.MustCompile(`(?:src|href)="(?:https?:)?//`),
	} {
		if m := bad.Find(page); m != nil {
			t.Errorf("the page has %q (matching %s)", m, bad)
		}
	}
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAll(page, -1) {
		if !strings.Contains(string(tag), ` src="/console/`) {
			t.Errorf("the page has %s, a script not loaded from /console/", tag)
		}
	}
	for _, p := range []string{"/console/app.js", "/console/style.css"} {
		if !strings.Contains(string(page), `"`+p+`"`) {
			t.Errorf("the page does not load %s", p)
		}
	}
}
