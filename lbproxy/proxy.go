// Package lbproxy is the reverse proxy of LOAD_BALANCER endpoints: it carries a caller's
// request for {public}/lb/{endpoint}/path to a worker chosen by its Admitter and relays the
// worker's answer. Plain keep-alive HTTP/1.1 requests are served by a connection loop of its
// own (loop.go), which scans heads in place and writes to a pool of worker connections
// (pool.go), relaying answers as they come (relay.go); everything else (upgrades, uploads of
// unknown length, HTTP/1.0) goes through httputil.ReverseProxy (reverse.go). Neither retries.
//
// The package knows nothing of keys, rate limits or endpoints: admission and the rendering of
// refusals belong to the Admitter (package api).
package lbproxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"
)

// Prefix is where LOAD_BALANCER endpoints take requests: {public}/lb/{id}/any/path?q reaches a
// worker as /any/path?q.
const Prefix = "/lb/"

// ForwardedHeader marks a request that a replica which does not lead forwarded to the leader
// (package api decides); the worker does not get it.
const ForwardedHeader = "X-Gantry-Forwarded"

// ErrReconnect says, wrapped in an Admit error, that the caller's connection is to close once
// the refusal is written: the caller's next request must come on a new connection (the replica
// stopped leading, and a new connection's first request is routed afresh).
var ErrReconnect = errors.New("the caller is to reconnect")

// A Target is the worker a request was admitted to.
type Target struct {
	Endpoint string // the endpoint's id, for errors
	Host     string // the worker's host:port
}

// An Admitter decides which requests reach a worker, and answers those that do not.
type Admitter interface {
	// WithWriter returns ctx carrying w, the response that Admit's headers (rate limits) go
	// to. The loop calls it once per caller connection, the general proxy once per request.
	WithWriter(ctx context.Context, w http.ResponseWriter) context.Context
	// Admit admits a request for endpoint (possibly empty) with the caller's Authorization
	// header value, waiting as long as it likes for a worker (until ctx ends). The proxy calls
	// release when the request is done with the worker. With an error, t.Endpoint is set when
	// the request was for an endpoint the caller may use (no worker came in time, say): the
	// refusal is observed as that endpoint's answer.
	Admit(ctx context.Context, endpoint, authorization string) (t Target, release func(), err error)
	// Refuse answers r with err: an error of Admit's, a *WorkerError (the worker failed before
	// any of its answer was relayed), or a body that could not be read (a *core.Error).
	Refuse(ctx context.Context, w http.ResponseWriter, r *http.Request, err error)
}

// A WorkerError is a worker's failure to answer, seen before anything of its answer reached
// the caller; the caller is to get a 502.
type WorkerError struct {
	Endpoint string
	Err      error
}

func (e *WorkerError) Error() string {
	return "the worker of endpoint " + e.Endpoint + " did not answer: " + e.Err.Error()
}

func (e *WorkerError) Unwrap() error { return e.Err }

// An Observer hears of each request an endpoint answered (metrics): the endpoint's id, the
// status its caller got, and the time from the request's arrival at the proxy (a wait for a
// worker included) to the end of its answer. A request refused before its endpoint is known
// (a bad key, an endpoint that is not the caller's) is not observed, nor one whose caller hung
// up before any answer. It is called on the request's goroutine, and must be quick.
type Observer interface {
	ObserveRequest(endpoint string, status int, elapsed time.Duration)
}

// Proxy serves requests under Prefix. Its zero value is not usable: call New.
type Proxy struct {
	adm     Admitter
	obs     Observer               // nil = none
	reverse *httputil.ReverseProxy // requests the loop does not carry
	pool    *pool                  // the loop's connections to workers

	callers  callerSet // caller connections the loop serves (loop.go)
	handoffs sync.Map  // *http.Server -> *handoff: where those connections go back to net/http
}

// New returns a proxy that admits requests through adm and tells obs (nil = none) of each
// request answered.
func New(adm Admitter, obs Observer) *Proxy {
	p := &Proxy{adm: adm, obs: obs, pool: newPool()}
	p.reverse = p.newReverse()
	return p
}

// ServeHTTP serves a request for a LOAD_BALANCER endpoint (its path starts with Prefix): a
// plain one on a keep-alive connection in the loop, anything else through the general proxy.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if canLoop(r) && p.loop(w, r) {
		return
	}
	p.serveReverse(w, r)
}

// Shutdown ends the connections the loop took from their http.Server: call it with the
// server's own Shutdown. Like it, it lets answers in progress finish, until ctx ends; a request
// waiting for a worker is refused once the server's base context ends.
func (p *Proxy) Shutdown(ctx context.Context) error { return p.callers.shutdown(ctx) }

// observe tells p's Observer, if any, of a request for endpoint answered with status.
func (p *Proxy) observe(endpoint string, status int, start time.Time) {
	if p.obs != nil && endpoint != "" && status != 0 {
		p.obs.ObserveRequest(endpoint, status, time.Since(start))
	}
}
