// Package console is Gantry's web console: plain HTML, CSS and JavaScript modules embedded in
// the binary and served by `gantry serve` at /, with nothing loaded from elsewhere, so the
// pages work offline. There is no build step: the files under static/ are what the browser
// runs. The console is a client of the public API (the key a user signs in with is kept in
// the browser's sessionStorage and sent as a bearer token, never in a URL) and of /metrics,
// whose samples it keeps in memory while it is open to draw its charts.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed static
var static embed.FS

// Prefix is the path under which the console's assets are served; / serves its page.
const Prefix = "/console/"

// CSP is the Content-Security-Policy of every console response: scripts, styles and
// connections only from this server, no inline script or style, no framing, no plugins.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the console: GET or HEAD of / is its page, of Prefix+name one of its assets;
// anything else is next's (the API's problem+json 404 and 405).
func Handler(next http.Handler) http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	assets := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if (r.Method != http.MethodGet && r.Method != http.MethodHead) || (p != "/" && !strings.HasPrefix(p, Prefix)) {
			next.ServeHTTP(w, r)
			return
		}
		name := "index.html"
		if p != "/" {
			name = path.Clean(strings.TrimPrefix(p, Prefix))
		}
		if f, err := fs.Stat(files, name); err != nil || f.IsDir() || name == "index.html" && p != "/" {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-cache") // revalidated: a new binary's assets show at once
		r2 := *r
		u := *r.URL
		u.Path = "/" + name
		if name == "index.html" {
			u.Path = "/" // FileServer redirects /index.html to ./
		}
		r2.URL = &u
		assets.ServeHTTP(w, &r2)
	})
}
