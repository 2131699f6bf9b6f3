package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/lbproxy"
	"github.com/gantryhq/gantry/oas"
)

// LBPrefix is where LOAD_BALANCER endpoints take requests: requestUrls.base is
// {public}/lb/{id}, and {public}/lb/{id}/any/path?q reaches a worker as /any/path?q.
const LBPrefix = lbproxy.Prefix

// lbOperation names proxied requests for scope checks: a jobs key may send them.
const lbOperation oas.OperationName = "loadBalancerRequest"

func init() { access[lbOperation] = core.JobWrite }

// DefaultLBHold is how long a request waits for a ready worker before a 503.
const DefaultLBHold = 60 * time.Second

// ForwardedHeader marks a LOAD_BALANCER request that a replica which does not lead forwarded
// to the leader: the replica that gets it serves it, or refuses it (503) when it does not lead
// either; it never forwards it again.
const ForwardedHeader = lbproxy.ForwardedHeader

// serveLB serves a request for a LOAD_BALANCER endpoint: on the replica that leads (or the
// only one) the proxy carries it, asking lbAdmission whether and where; on another, after the
// key is checked here, it goes to the leader, whose scheduler alone knows the workers.
func (a *API) serveLB(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Leader != nil {
		if self, holder, peer := a.cfg.Leader(); !self {
			a.forwardLB(w, r, holder, peer)
			return
		}
	}
	a.lb.ServeHTTP(w, r)
}

// Shutdown ends the connections the load-balancing proxy took from the http.Server: call it
// with the server's own Shutdown. Like it, it lets answers in progress finish, until ctx
// ends; a request waiting for a worker is answered 503 once the server's base context ends.
// The forwarder's idle connections to the leader close at once.
func (a *API) Shutdown(ctx context.Context) error {
	a.fwd.Transport.(*http.Transport).CloseIdleConnections()
	return a.lb.Shutdown(ctx)
}

// lbAdmission is the load-balancing proxy's admission: the key, its scope, the rate limits,
// the endpoint and a ready worker; and the problem+json answers when any is missing.
type lbAdmission struct{ a *API }

var _ lbproxy.Admitter = lbAdmission{}

// WithWriter puts w where the security handler sets the rate-limit headers.
func (l lbAdmission) WithWriter(ctx context.Context, w http.ResponseWriter) context.Context {
	return context.WithValue(ctx, writerKey{}, w)
}

// Admit admits a request for endpoint id as job operations are admitted (the key with or
// without "Bearer ", its scope, the rate limits, whose headers go to ctx's writer) and waits,
// up to the hold, for a ready worker. The caller calls release when the request is done.
//
// A replica that stopped leading while a caller's connection was open refuses the
// connection's later requests at once (503, Retry-After), and the proxy closes it: the
// caller's next connection is forwarded to the new leader.
func (l lbAdmission) Admit(ctx context.Context, id, authorization string) (t lbproxy.Target, release func(), err error) {
	a := l.a
	if a.cfg.Leader != nil {
		if self, _, _ := a.cfg.Leader(); !self {
			return t, nil, &core.Error{Kind: core.KindUnavailable, RetryAfter: 1, Err: lbproxy.ErrReconnect,
				Detail: "this replica stopped leading the LOAD_BALANCER workers while the connection was open; retry on a new connection"}
		}
	}
	ep, ctx, err := l.check(ctx, id, authorization, true)
	if err != nil {
		return t, nil, err
	}
	if a.cfg.Balancer == nil {
		return t, nil, core.Errorf(core.KindUnavailable, "this server runs no LOAD_BALANCER workers")
	}
	base, release, err := a.cfg.Balancer.Acquire(ctx, ep.ID, a.cfg.LBHold)
	if err != nil {
		return lbproxy.Target{Endpoint: ep.ID}, nil, err // observed as the endpoint's answer
	}
	return lbproxy.Target{Endpoint: ep.ID, Host: base.Host}, release, nil
}

// check checks a request for endpoint id: the key (with or without "Bearer "), its scope, and
// that the endpoint is the key's and takes LOAD_BALANCER requests. With count (the replica
// that serves it), the request counts against the rate limits once the key is known, as every
// operation does. Without count (a replica that forwards it to the leader, which counts it),
// a request refused here never reaches the leader, so this replica counts it: a caller
// sending requests that are bound to be refused still spends their quota, and gets 429 once
// it is used up. The ctx returned carries the key's principal.
func (l lbAdmission) check(ctx context.Context, id, authorization string, count bool) (core.Endpoint, context.Context, error) {
	a := l.a
	if id == "" {
		return core.Endpoint{}, ctx, core.Errorf(core.KindNotFound, "name an endpoint: %s{endpoint_id}/...", LBPrefix)
	}
	p, err := a.cfg.Auth.Authenticate(ctx, bearerless(authorization))
	if err != nil {
		return core.Endpoint{}, ctx, a.h.outage(ctx, err)
	}
	if count {
		if err := a.h.count(ctx, &p); err != nil {
			return core.Endpoint{}, ctx, err
		}
	}
	ep, err := l.endpoint(ctx, &p, id)
	if err != nil && !count {
		if cerr := a.h.count(ctx, &p); cerr != nil {
			return core.Endpoint{}, ctx, cerr
		}
	}
	return ep, context.WithValue(ctx, principalKey{}, &p), err
}

// endpoint checks that p's scope allows LOAD_BALANCER requests, and returns p's endpoint id
// when p may use it and it takes them.
func (l lbAdmission) endpoint(ctx context.Context, p *core.Principal, id string) (core.Endpoint, error) {
	if !p.Allows(access[lbOperation]) && p.Scope != core.ScopeAll {
		return core.Endpoint{}, core.Errorf(core.KindForbidden, "this key's scope %q does not allow %s", p.Scope, lbOperation)
	}
	ep, err := l.a.cfg.Management.GetEndpoint(ctx, p.User, id)
	switch {
	case err != nil:
		return core.Endpoint{}, err
	case !p.AllowsEndpoint(ep.ID):
		return core.Endpoint{}, core.Errorf(core.KindForbidden, "this key may not use endpoint %q", ep.ID)
	case ep.Type != core.TypeLoadBalancer:
		return core.Endpoint{}, core.Errorf(core.KindConflict, "endpoint %q is a QUEUE endpoint: send jobs to /v2/%s/run", ep.ID, ep.ID)
	}
	return ep, nil
}

// Refuse renders err as a problem: a worker's failure as a 502, anything else as every
// other operation's errors are rendered.
func (l lbAdmission) Refuse(ctx context.Context, w http.ResponseWriter, r *http.Request, err error) {
	if we, ok := errors.AsType[*lbproxy.WorkerError](err); ok {
		l.a.writeProblem(w, r, &core.Error{Kind: kindBadGateway, Detail: we.Error()})
		return
	}
	l.a.renderError(ctx, w, r, err)
}

// forwardTo is where forwardLB sends a request: the leader's peer URL.
type forwardTo struct {
	holder string
	url    *url.URL
}

type forwardKey struct{}

// forwardLB serves a LOAD_BALANCER request on a replica that does not lead: it checks the
// key, scope and endpoint here (a bad key gets its 401 from this replica, and a request refused
// here counts against the caller's rate limits here), then forwards the
// request to the leader, holder, at peer, marked with ForwardedHeader, and relays the leader's
// answer. The leader admits it as any other (its rate limits count it once) and proxies it to
// a worker, whose in-flight count, idle timer and scale from zero it keeps. Bodies stream
// both ways; upgrades pass through.
func (a *API) forwardLB(w http.ResponseWriter, r *http.Request, holder, peer string) {
	unavailable := func(retry int64, format string, args ...any) {
		a.writeProblem(w, r, &core.Error{Kind: core.KindUnavailable, RetryAfter: retry, Detail: fmt.Sprintf(format, args...)})
	}
	if r.Header.Get(ForwardedHeader) != "" {
		// Sent by a replica that takes this one for the leader: leadership has just moved.
		unavailable(1, "this replica does not lead the LOAD_BALANCER workers (any more): the request was forwarded to it by a replica that has not yet heard of the new leader; retry shortly")
		return
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, LBPrefix), "/")
	// The writer is where a refusal counted here puts its RateLimit headers.
	ctx := context.WithValue(r.Context(), writerKey{}, w)
	if _, _, err := (lbAdmission{a}).check(ctx, id, r.Header.Get("Authorization"), false); err != nil {
		a.renderError(r.Context(), w, r, err)
		return
	}
	var to *url.URL
	if peer != "" {
		var err error
		if to, err = url.Parse(peer); err != nil {
			a.cfg.Log.Error("the leader published a bad peerUrl", "leader", holder, "peerUrl", peer, "err", err)
		}
	}
	switch {
	case holder == "":
		unavailable(1, "no replica leads yet, and only the leader runs LOAD_BALANCER workers; retry shortly (an election takes up to two lease periods)")
		return
	case to == nil:
		unavailable(0, "this replica forwards LOAD_BALANCER requests to the leading replica (%s), which runs the workers, but the leader published no peerUrl to reach it at: set peerUrl (--peer-url, GANTRY_PEER_URL) on every replica to an address the others can reach, e.g. http://10.0.0.5:8080", holder)
		return
	}
	a.fwd.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardKey{}, &forwardTo{holder: holder, url: to})))
}

// newLBForward is the proxy of forwardLB. Like lbproxy's, it flushes streamed answers as they
// come and never retries; it keeps the caller's key (the leader checks and counts it) and
// Host, appends to X-Forwarded-For, and marks the request with ForwardedHeader.
func (a *API) newLBForward() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			to := pr.In.Context().Value(forwardKey{}).(*forwardTo)
			pr.SetURL(to.url)
			pr.Out.Host = pr.In.Host // the worker sees the Host the caller sent, as when it reaches the leader
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
			pr.Out.Header.Set(ForwardedHeader, "1")
			if pr.Out.Body == nil || pr.Out.Body == http.NoBody {
				// As in lbproxy: an empty body net/http cannot rewind keeps it from resending a
				// bodiless request whose reused connection broke, so the worker never gets it twice.
				pr.Out.Body, pr.Out.GetBody = io.NopCloser(strings.NewReader("")), nil
			}
		},
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true, // relayed as the worker sent it
		},
		FlushInterval: -1, // every write of the leader's answer reaches the caller at once
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the caller went away
			}
			to := r.Context().Value(forwardKey{}).(*forwardTo)
			a.cfg.Log.Warn("forwarding a LOAD_BALANCER request to the leader", "leader", to.holder, "peerUrl", to.url.String(), "path", r.URL.Path, "err", err)
			a.writeProblem(w, r, &core.Error{Kind: kindBadGateway,
				Detail: fmt.Sprintf("this replica forwards LOAD_BALANCER requests to the leading replica (%s), which could not be reached: %v", to.holder, err)})
		},
	}
}
