package api

import (
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/gantryhq/gantry/core"
)

// This file gives requests that reach no operation the problem+json answers operations give:
// a path that is not clean, the methods of the routes outside openapi.yaml, and a HEAD of a
// produced file (problemconn.go does the same for what net/http refuses itself).

// HeadAllow is the Allow value of /healthz and /metrics.
const HeadAllow = "GET, HEAD"

// healthzMethod refuses (405) every method of /healthz but GET and HEAD; false when it did.
func (a *API) healthzMethod(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	a.NotAllowed(HeadAllow).ServeHTTP(w, r)
	return false
}

// NotAllowed answers 405 with Allow, as problem+json: for a route served beside the API
// (gantry serve's GET /metrics) asked with another method.
func (a *API) NotAllowed(allow string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.methodNotAllowed(w, r, allow) })
}

// CleanPaths serves next, but answers a request whose path is not clean (an empty, "." or
// ".." segment) itself: a 307 to the clean path, as http.ServeMux would, with a problem+json
// body instead of ServeMux's text/html.
func (a *API) CleanPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			escaped := r.URL.EscapedPath()
			if clean := cleanPath(escaped); clean != escaped {
				loc := clean
				if r.URL.RawQuery != "" {
					loc += "?" + r.URL.RawQuery
				}
				w.Header().Set("Location", loc)
				a.writeProblem(w, r, &core.Error{Kind: kindRedirect,
					Detail: "the path " + strconv.Quote(escaped) + " is not clean; the same request to " + strconv.Quote(loc) + " is the one meant"})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// cleanPath is the path http.ServeMux serves p as: path.Clean's, keeping a trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// headAsGet is the request the router sees for r: a HEAD of a produced file or of
// /openapi.yaml is routed as the GET it stands for (net/http drops the body of a HEAD answer;
// GetFile also reads the request in its context, for Range and conditional requests).
func headAsGet(r *http.Request) *http.Request {
	if r.Method != http.MethodHead || !headable(r.URL.Path) {
		return r
	}
	g := *r
	g.Method = http.MethodGet
	return &g
}

// headable reports whether path is a GET route of the API that answers HEAD as well: a produced
// file and /openapi.yaml, as /healthz and /metrics do.
func headable(path string) bool {
	return path == "/openapi.yaml" || strings.HasPrefix(path, "/files/")
}

// fileHeaders are the headers of every answer under /files/: a produced file is served from
// the console's origin, and a file is checked by its first bytes alone (GIF89a<html>... is a
// GIF to that check), so the browser must neither sniff another type from it (nosniff) nor
// run it as a page of the origin (a sandbox CSP: no script, no same-origin access).
func fileHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
}
