package api

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// LBPrefix is where LOAD_BALANCER endpoints take requests: requestUrls.base is
// {public}/lb/{id}, and {public}/lb/{id}/any/path?q reaches a worker as /any/path?q.
const LBPrefix = "/lb/"

// lbOperation names proxied requests for scope checks: a jobs key may send them.
const lbOperation oas.OperationName = "loadBalancerRequest"

func init() { access[lbOperation] = core.JobWrite }

// DefaultLBHold is how long a request waits for a ready worker before a 503.
const DefaultLBHold = 60 * time.Second

type lbTarget struct {
	endpoint   string
	host       string // the worker's host:port
	path, raw  string // the path after /lb/{id}, decoded and as sent
	hasRawPath bool
}

type lbTargetKey struct{}

// newProxy is the reverse proxy of LOAD_BALANCER endpoints: bodies stream both ways (nothing
// is held whole), WebSocket and other upgrades pass through, streamed responses (unknown
// length, event streams) are flushed as they come, and a failed request is never retried: the
// worker's error, or the proxy's 502, goes back as is.
func (a *API) newProxy() *httputil.ReverseProxy {
	transport := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       30 * time.Second,
		DisableCompression:    true,
		ResponseHeaderTimeout: 0, // a worker may think as long as it likes
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(lbTargetKey{}).(*lbTarget)
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", t.host
			pr.Out.URL.Path, pr.Out.URL.RawPath = t.path, ""
			if t.hasRawPath {
				pr.Out.URL.RawPath = t.raw
			}
			pr.Out.Host = ""
			pr.Out.Header.Del("Authorization")                                 // the caller's key is Gantry's business, not the worker's
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"] // SetXForwarded appends to it
			pr.SetXForwarded()
			if pr.Out.Body == nil || pr.Out.Body == http.NoBody {
				// net/http resends a bodiless GET whose reused connection broke after it was
				// written, so a worker could get it twice: an empty body it cannot rewind
				// makes the request non-replayable (net/http still sends no body for it).
				pr.Out.Body, pr.Out.GetBody = io.NopCloser(strings.NewReader("")), nil
			}
		},
		Transport: transport,
		// FlushInterval 0: ReverseProxy flushes at once anyway for responses of unknown length
		// and text/event-stream, so streams stream; a fixed-length answer is written once.
		BufferPool: bufferPool{},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the caller went away
			}
			a.badGateway(w, r, r.Context().Value(lbTargetKey{}).(*lbTarget), err)
		},
	}
}

// serveLB serves a request for a LOAD_BALANCER endpoint: a plain one on a keep-alive
// connection in a loop of its own (lbloop.go), anything else (upgrades, uploads of unknown
// length, HTTP/1.0) through httputil.ReverseProxy.
func (a *API) serveLB(w http.ResponseWriter, r *http.Request) {
	if canLoop(r) && a.loopLB(w, r) {
		return
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, LBPrefix), "/")
	ctx := context.WithValue(r.Context(), writerKey{}, w)
	t, release, err := a.admitLB(ctx, id, r.Header.Get("Authorization"))
	if err != nil {
		a.renderError(r.Context(), w, r, err)
		return
	}
	defer release()
	prefix := LBPrefix + id
	t.path = cmpPath(strings.TrimPrefix(r.URL.Path, prefix))
	if r.URL.RawPath != "" {
		t.raw, t.hasRawPath = cmpPath(strings.TrimPrefix(r.URL.RawPath, prefix)), true
	}
	a.proxy.ServeHTTP(w, r.WithContext(context.WithValue(ctx, lbTargetKey{}, t)))
}

// admitLB admits a request for endpoint id as job operations are admitted (the key with or
// without "Bearer ", its scope, the rate limits, whose headers go to ctx's writer) and waits,
// up to the hold, for a ready worker. The caller calls release when the request is done.
func (a *API) admitLB(ctx context.Context, id, authorization string) (t *lbTarget, release func(), err error) {
	if id == "" {
		return nil, nil, core.Errorf(core.KindNotFound, "name an endpoint: %s{endpoint_id}/...", LBPrefix)
	}
	ctx, err = a.h.authenticate(ctx, lbOperation, bearerless(authorization))
	if err != nil {
		return nil, nil, err
	}
	p := principalOf(ctx)
	ep, err := a.cfg.Management.GetEndpoint(ctx, p.User, id)
	switch {
	case err != nil:
		return nil, nil, err
	case !p.AllowsEndpoint(ep.ID):
		return nil, nil, core.Errorf(core.KindForbidden, "this key may not use endpoint %q", ep.ID)
	case ep.Type != core.TypeLoadBalancer:
		return nil, nil, core.Errorf(core.KindConflict, "endpoint %q is a QUEUE endpoint: send jobs to /v2/%s/run", ep.ID, ep.ID)
	case a.cfg.Balancer == nil:
		return nil, nil, core.Errorf(core.KindUnavailable, "this server runs no LOAD_BALANCER workers")
	}
	base, release, err := a.cfg.Balancer.Acquire(ctx, ep.ID, a.cfg.LBHold)
	if err != nil {
		return nil, nil, err
	}
	return &lbTarget{endpoint: ep.ID, host: base.Host}, release, nil
}

func cmpPath(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// bufferPool recycles the proxy's copy buffers.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }
