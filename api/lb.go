package api

import (
	"context"
	"errors"
	"net/http"
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

// serveLB serves a request for a LOAD_BALANCER endpoint: the proxy carries it, asking
// lbAdmission whether and where.
func (a *API) serveLB(w http.ResponseWriter, r *http.Request) { a.lb.ServeHTTP(w, r) }

// Shutdown ends the connections the load-balancing proxy took from the http.Server: call it
// with the server's own Shutdown. Like it, it lets answers in progress finish, until ctx
// ends; a request waiting for a worker is answered 503 once the server's base context ends.
func (a *API) Shutdown(ctx context.Context) error { return a.lb.Shutdown(ctx) }

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
func (l lbAdmission) Admit(ctx context.Context, id, authorization string) (t lbproxy.Target, release func(), err error) {
	a := l.a
	if id == "" {
		return t, nil, core.Errorf(core.KindNotFound, "name an endpoint: %s{endpoint_id}/...", LBPrefix)
	}
	ctx, err = a.h.authenticate(ctx, lbOperation, bearerless(authorization))
	if err != nil {
		return t, nil, err
	}
	p := principalOf(ctx)
	ep, err := a.cfg.Management.GetEndpoint(ctx, p.User, id)
	switch {
	case err != nil:
		return t, nil, err
	case !p.AllowsEndpoint(ep.ID):
		return t, nil, core.Errorf(core.KindForbidden, "this key may not use endpoint %q", ep.ID)
	case ep.Type != core.TypeLoadBalancer:
		return t, nil, core.Errorf(core.KindConflict, "endpoint %q is a QUEUE endpoint: send jobs to /v2/%s/run", ep.ID, ep.ID)
	case a.cfg.Balancer == nil:
		return t, nil, core.Errorf(core.KindUnavailable, "this server runs no LOAD_BALANCER workers")
	}
	base, release, err := a.cfg.Balancer.Acquire(ctx, ep.ID, a.cfg.LBHold)
	if err != nil {
		return t, nil, err
	}
	return lbproxy.Target{Endpoint: ep.ID, Host: base.Host}, release, nil
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
