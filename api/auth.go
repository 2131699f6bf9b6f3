package api

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// access classifies every authenticated operation for scope checks. An operation missing here
// is refused to every key but a full-access one (see scopeAllows).
var access = map[oas.OperationName]core.Access{
	oas.CreateEndpointOperation:       core.ManageWrite,
	oas.ListEndpointsOperation:        core.ManageRead,
	oas.GetEndpointOperation:          core.ManageRead,
	oas.UpdateEndpointOperation:       core.ManageWrite,
	oas.DeleteEndpointOperation:       core.ManageWrite,
	oas.CreateTemplateOperation:       core.ManageWrite,
	oas.ListTemplatesOperation:        core.ManageRead,
	oas.GetTemplateOperation:          core.ManageRead,
	oas.UpdateTemplateOperation:       core.ManageWrite,
	oas.DeleteTemplateOperation:       core.ManageWrite,
	oas.ListCatalogTemplatesOperation: core.ManageRead,
	oas.ListCatalogGpusOperation:      core.ManageRead,
	oas.ListCatalogCpusOperation:      core.ManageRead,
	oas.CreateEndpointV1Operation:     core.ManageWrite,
	oas.RunJobOperation:               core.JobWrite,
	oas.RunSyncJobOperation:           core.JobWrite,
	oas.GetJobStatusOperation:         core.JobRead,
	oas.PostJobStatusOperation:        core.JobRead,
	oas.GetJobStatusSyncOperation:     core.JobRead,
	oas.PostJobStatusSyncOperation:    core.JobRead,
	oas.GetJobStreamOperation:         core.JobRead,
	oas.PostJobStreamOperation:        core.JobRead,
	oas.CancelJobOperation:            core.JobWrite,
	oas.RetryJobOperation:             core.JobWrite,
	oas.PurgeQueueOperation:           core.JobWrite,
	oas.GetHealthOperation:            core.JobRead,
	oas.GetEndpointHistoryOperation:   core.JobRead,
	oas.ListWorkersOperation:          core.ManageRead,
	oas.GetWorkerLogsOperation:        core.ManageRead,
	oas.ListModelsOperation:           core.JobRead,
	oas.GetUsageOperation:             core.ManageRead,
	oas.ListJobsOperation:             core.JobRead,
	// createKey, listKeys and deleteKey are left out: only an all key manages keys.
}

// isJobOp reports whether an operation id (as the router names it) is a job or worker
// operation, whose errors also carry the RunPod-style "error" field.
func isJobOp(opID string) bool {
	if isWorkerOp(opID) {
		return true
	}
	for name, a := range access {
		if a == core.JobRead || a == core.JobWrite {
			if strings.EqualFold(string(name), opID) {
				return true
			}
		}
	}
	return false
}

type principalKey struct{}

// principalOf returns the caller the security handler authenticated.
func principalOf(ctx context.Context) *core.Principal {
	p, _ := ctx.Value(principalKey{}).(*core.Principal)
	return p
}

// HandleBearerAuth authenticates management calls: "Authorization: Bearer <key>".
func (h *handler) HandleBearerAuth(ctx context.Context, op oas.OperationName, t oas.BearerAuth) (context.Context, error) {
	if principalOf(ctx) != nil { // authenticated before the body was read (preauthenticate)
		return ctx, nil
	}
	return h.authenticate(ctx, op, t.Token)
}

// HandleJobKey authenticates job operations: the key with or without "Bearer ".
func (h *handler) HandleJobKey(ctx context.Context, op oas.OperationName, t oas.JobKey) (context.Context, error) {
	if principalOf(ctx) != nil { // authenticated before the body was read (preauthenticate)
		return ctx, nil
	}
	return h.authenticate(ctx, op, bearerless(t.APIKey))
}

// bearerless is an Authorization value without its "Bearer " scheme, when it has one: job
// calls, worker calls and the load-balancing proxy take the key either way, as RunPod does.
func bearerless(v string) string {
	v = strings.TrimSpace(v)
	if scheme, rest, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(rest)
	}
	if strings.EqualFold(v, "Bearer") {
		return "" // the scheme without a key: a missing key, as on management routes
	}
	return v
}

// HandleWorkerToken takes the worker protocol's bare token; each handler checks it against the
// route's endpoint and worker (the security handler does not see path parameters).
func (h *handler) HandleWorkerToken(ctx context.Context, op oas.OperationName, t oas.WorkerToken) (context.Context, error) {
	if _, ok := ctx.Value(workerTokenKey{}).(workerAuthed); ok { // checked by preauthenticate
		return ctx, nil
	}
	return context.WithValue(ctx, workerTokenKey{}, bearerless(t.APIKey)), nil
}

// LimiterRetryAfter is the Retry-After, in seconds, of a request refused because the rate
// limiter could not count it.
const LimiterRetryAfter = 1

// authenticate checks the key, counts the request against the user's rate-limit windows (setting
// the RateLimit headers on the response), then checks the key's scope.
func (h *handler) authenticate(ctx context.Context, op oas.OperationName, key string) (context.Context, error) {
	p, err := h.cfg.Auth.Authenticate(ctx, key)
	if err != nil {
		return ctx, h.outage(ctx, err)
	}
	if err := h.count(ctx, &p); err != nil {
		return ctx, err
	}
	if a, ok := access[op]; !(ok && p.Allows(a)) && p.Scope != core.ScopeAll {
		return ctx, core.Errorf(core.KindForbidden, "this key's scope %q does not allow %s", p.Scope, op)
	}
	return context.WithValue(ctx, principalKey{}, &p), nil
}

// outage logs err when it is an outage of a store (KindUnavailable with a cause), and returns it.
func (h *handler) outage(ctx context.Context, err error) error {
	if e, ok := errors.AsType[*core.Error](err); ok && e.Kind == core.KindUnavailable && e.Err != nil && ctx.Err() == nil {
		h.cfg.Log.Error("a store cannot answer", "err", err)
	}
	return err
}

// count counts one request of p against the user's rate-limit windows, setting the RateLimit
// headers on the response; KindRateLimited when a window is used up.
func (h *handler) count(ctx context.Context, p *core.Principal) error {
	d, err := h.cfg.Limiter.Allow(ctx, p.User, p.Quota, h.cfg.Clock.Now())
	if err != nil {
		// Fail closed: a request the limiter cannot count is refused, not waved through. A
		// shared limiter fails when its store does, which the request would most likely need
		// too; and replicas admitting uncounted traffic would multiply the load just when the
		// store struggles. 503 with Retry-After is what clients already retry.
		if ctx.Err() == nil { // not merely a client gone
			h.cfg.Log.Error("counting a request against the rate limit", "user", p.User, "err", err)
		}
		return &core.Error{Kind: core.KindUnavailable, RetryAfter: LimiterRetryAfter, Err: err,
			Detail: "the rate limiter cannot count this request now; retry in a second"}
	}
	setRateLimitHeaders(headerOf(ctx), d)
	if !d.Allowed {
		return &core.Error{Kind: core.KindRateLimited, RetryAfter: d.RetryAfter,
			Detail: "rate limit exceeded: the " + d.Exceeded + " window's quota is used up"}
	}
	return nil
}

// setRateLimitHeaders writes RateLimit and RateLimit-Policy as RFC 9651 lists, one member per
// window: `"minute";r=..;t=..` and `"minute";q=..;w=60`. Exempt users get neither. They are
// written by hand, not through a structured-fields encoder, because every authenticated request
// carries them: the encoder's items, parameters and builders were the largest share of a
// durable /run's allocations. Window names are core's ("minute", "hour", "day"), which need
// no escaping in a string item; the keys are given in canonical form, so Set copies nothing.
func setRateLimitHeaders(h interface{ Set(string, string) }, d core.Decision) {
	if len(d.Windows) == 0 {
		return
	}
	buf := make([]byte, 0, 96)
	member := func(i int, name, k1 string, v1 int64, k2 string, v2 int64) {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = append(append(append(buf, '"'), name...), '"', ';')
		buf = strconv.AppendInt(append(append(buf, k1...), '='), v1, 10)
		buf = strconv.AppendInt(append(append(buf, ';'), k2...), v2, 10)
	}
	for i, w := range d.Windows {
		member(i, w.Name, "r", int64(w.Remaining), "t=", w.Reset)
	}
	h.Set("Ratelimit", string(buf))
	buf = buf[:0]
	for i, w := range d.Windows {
		member(i, w.Name, "q", int64(w.Quota), "w=", w.Length)
	}
	h.Set("Ratelimit-Policy", string(buf))
}
