package api

import (
	"net/http"

	"github.com/gantryhq/gantry/core"
)

// DrainRetryAfter is the Retry-After, in seconds, of a request refused while draining.
const DrainRetryAfter = "5"

// Drain starts a graceful stop: /healthz answers 503, and every new request but the workers'
// (job-take, job-done, job-stream, job-stop, ping, job-file) is refused with a 503
// problem+json and Retry-After, on a connection that then closes. The job engine hands out no
// more jobs (core.Jobs.Drain: job-take answers 204 when its long poll ends). Requests already
// in flight go on (a runsync waiting for its job still gets it), and workers can post the
// results of the jobs they run. There is no way back.
func (a *API) Drain() {
	a.draining.Store(true)
	a.SetReady(false)
	if a.cfg.Jobs != nil {
		a.cfg.Jobs.Drain()
	}
}

// refuseDraining answers a request that is not a worker's while draining, and reports whether
// it did.
func (a *API) refuseDraining(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.Path == "/healthz" {
		return false
	}
	if route, ok := a.oas.FindPath(r.Method, r.URL); ok && isWorkerOp(route.OperationID()) {
		return false
	}
	w.Header().Set("Retry-After", DrainRetryAfter)
	w.Header().Set("Connection", "close")
	a.writeProblem(w, r, core.Errorf(core.KindUnavailable, "the server is shutting down and takes no new requests; retry in a few seconds"))
	return true
}

// notReady is what /healthz says while it answers 503.
func (a *API) notReady() string {
	if a.draining.Load() {
		return "shutting down"
	}
	return "starting up"
}
