package api

import (
	"context"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// keyAdmin is the key management the keys operations delegate to.
func (h *handler) keyAdmin() *core.KeyAdmin {
	return &core.KeyAdmin{Keys: h.cfg.Auth.Keys, Endpoints: h.cfg.Management, Defaults: h.cfg.Auth.Defaults, Clock: h.cfg.Clock,
		ExpiredGrace: h.cfg.ExpiredKeyGrace}
}

// keyLimit counts a key operation of the caller against core.KeyManageQuota, on top of the
// request quota authenticate counted: a user's key management is rate limited on its own.
func (h *handler) keyLimit(ctx context.Context) (*core.Principal, error) {
	p := principalOf(ctx)
	// "keys:" cannot start a user name, so the windows are the user's key windows alone.
	d, err := h.cfg.Limiter.Allow(ctx, "keys:"+p.User, core.KeyManageQuota, h.cfg.Clock.Now())
	if err != nil {
		return nil, &core.Error{Kind: core.KindUnavailable, RetryAfter: LimiterRetryAfter, Err: err,
			Detail: "the rate limiter cannot count this request now; retry in a second"}
	}
	if !d.Allowed {
		return nil, &core.Error{Kind: core.KindRateLimited, RetryAfter: d.RetryAfter,
			Detail: "key management rate limit exceeded: the " + d.Exceeded + " window's quota of key operations is used up"}
	}
	return p, nil
}

// CreateKey implements createKey: a key for the caller's own user, made with (a child of) the
// caller's key, so that it expires no later and is revoked with it.
func (h *handler) CreateKey(ctx context.Context, req *oas.CreateKeyRequest) (oas.CreateKeyRes, error) {
	p, err := h.keyLimit(ctx)
	if err != nil {
		return nil, err
	}
	r := core.KeyRequest{Scope: core.Scope(req.Scope.Or(oas.KeyScopeAll)), Endpoints: req.Endpoints,
		ExpiresIn: time.Duration(req.ExpiresIn.Or(0)) * time.Second, Parent: p.KeyID}
	if q, ok := req.Quota.Get(); ok {
		r.Quota = &core.QuotaChange{Minute: optInt(q.Minute), Hour: optInt(q.Hour), Day: optInt(q.Day)}
	}
	k, secret, err := h.keyAdmin().Create(ctx, p.User, r, true)
	if err != nil {
		return nil, err
	}
	out := key(&k)
	return &oas.CreatedKeyHeaders{Response: oas.CreatedKey{ID: out.ID, User: out.User, Scope: out.Scope,
		Endpoints: out.Endpoints, CreatedAt: out.CreatedAt, ExpiresAt: out.ExpiresAt, Secret: secret}}, nil
}

// ListKeys implements listKeys.
func (h *handler) ListKeys(ctx context.Context) (oas.ListKeysRes, error) {
	p, err := h.keyLimit(ctx)
	if err != nil {
		return nil, err
	}
	keys, err := h.keyAdmin().List(ctx, p.User)
	if err != nil {
		return nil, err
	}
	out := oas.KeyList{Items: make([]oas.Key, len(keys))}
	for i := range keys {
		out.Items[i] = key(&keys[i])
	}
	return &oas.KeyListHeaders{Response: out}, nil
}

// DeleteKey implements deleteKey.
func (h *handler) DeleteKey(ctx context.Context, params oas.DeleteKeyParams) (oas.DeleteKeyRes, error) {
	p, err := h.keyLimit(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := h.keyAdmin().Revoke(ctx, p.User, params.KeyId); err != nil {
		return nil, err
	}
	return &oas.DeleteKeyNoContent{}, nil
}

func key(k *core.Key) oas.Key {
	out := oas.Key{ID: k.ID, User: k.User, Scope: oas.KeyScope(k.Scope), Endpoints: k.Endpoints, CreatedAt: k.CreatedAt}
	if k.ExpiresAt != nil {
		out.ExpiresAt = oas.NewOptDateTime(*k.ExpiresAt)
	}
	return out
}

func optInt(o oas.OptInt) *int {
	if v, ok := o.Get(); ok {
		return &v
	}
	return nil
}
