package core

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// KeyManageQuota bounds the key operations (create, list, revoke) of one user, on top of
// their request quota: guessing or churning keys stays slow even for a user without limits.
var KeyManageQuota = Quota{Minute: 30, Hour: 300, Day: 1000}

// UserNameRE is the form of a user name.
var UserNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// KeyRequest is what a new key may do: the fields the key is made with.
type KeyRequest struct {
	Scope     Scope
	Endpoints []string      // ScopeJobs: endpoint or model ids; empty = all
	ExpiresIn time.Duration // 0 = never expires
	// Quota, when set, changes the user's own quota: each window set (non-nil) replaces it.
	Quota *QuotaChange
	// Parent is the id of the key that makes this one (the caller's own, over the API); ""
	// for a key the operator makes. A child never outlives its parent: its expiry is capped
	// at the parent's, and it stops working when the parent (or any key above it) is revoked
	// or expires.
	Parent string
}

// DefaultExpiredKeyGrace is how long an expired key stays in the key list, so that its owner
// sees that it expired, before List deletes it.
const DefaultExpiredKeyGrace = 7 * 24 * time.Hour

// QuotaChange sets some of a user's quota windows; nil leaves a window as it is. 0 = unlimited.
type QuotaChange struct{ Minute, Hour, Day *int }

// KeyAdmin is the management of API keys: by a user over the API (Create with lower=true),
// or by the operator offline.
type KeyAdmin struct {
	Keys KeyStore
	// Endpoints checks a jobs key's endpoint ids; nil = they are not checked.
	Endpoints *Management
	Defaults  Quota // the quota of users without their own
	Clock     Clock
	// ExpiredGrace is how long an expired key stays listed before List deletes it;
	// 0 = DefaultExpiredKeyGrace.
	ExpiredGrace time.Duration
}

// Create issues a key for user (created if needed) and returns it with its secret, which is
// stored only as a hash. With lowerOnly (a user over the API), a quota change may only lower
// the user's quota, so that no key can lift its own rate limit. A key made by a key (r.Parent)
// expires no later than its parent and records its ancestry, so that it ends with them.
func (a *KeyAdmin) Create(ctx context.Context, user string, r KeyRequest, lowerOnly bool) (Key, string, error) {
	var errs []FieldError
	if !UserNameRE.MatchString(user) {
		errs = append(errs, FieldError{"$.user", fmt.Sprintf("%q: use letters, digits, '.', '_' or '-' (at most 64)", user)})
	}
	if _, err := ParseScope(string(r.Scope)); err != nil {
		errs = append(errs, FieldError{"$.scope", err.Error()})
	}
	if len(r.Endpoints) > 0 && r.Scope != ScopeJobs {
		errs = append(errs, FieldError{"$.endpoints", "applies only with scope jobs"})
	}
	if r.ExpiresIn < 0 {
		errs = append(errs, FieldError{"$.expiresIn", "must not be negative"})
	}
	for i, id := range r.Endpoints {
		path := fmt.Sprintf("$.endpoints[%d]", i)
		switch _, _, err := a.endpoint(ctx, user, id); {
		case id == "":
			errs = append(errs, FieldError{path, "is empty"})
		case KindOf(err) == KindNotFound:
			errs = append(errs, FieldError{path, fmt.Sprintf("user %s has no endpoint %q, and no ready-made model has that id", user, id)})
		case err != nil:
			return Key{}, "", err
		}
	}
	if len(errs) > 0 {
		return Key{}, "", Invalid(errs...)
	}
	now := a.Clock.Now().UTC()
	parent, err := a.parent(ctx, user, r.Parent, now)
	if err != nil {
		return Key{}, "", err
	}
	u, err := a.Keys.GetUser(ctx, user)
	created := errors.Is(err, ErrNotFound)
	switch {
	case created:
		u = User{Name: user, CreatedAt: now}
	case err != nil:
		return Key{}, "", Unavailable("reading the user", err)
	}
	if r.Quota != nil {
		q := a.Defaults
		if u.Quota != nil {
			q = *u.Quota
		}
		next, err := r.Quota.apply(q, lowerOnly)
		if err != nil {
			return Key{}, "", err
		}
		u.Quota = &next
	}
	if created || r.Quota != nil {
		if err := a.Keys.PutUser(ctx, u); err != nil {
			return Key{}, "", Unavailable("storing the user", err)
		}
	}
	secret := NewKeySecret()
	k := Key{ID: "key_" + NewID(10), Hash: HashKey(secret), User: user, Scope: r.Scope, Endpoints: r.Endpoints, CreatedAt: now}
	if r.ExpiresIn > 0 {
		t := now.Add(r.ExpiresIn)
		k.ExpiresAt = &t
	}
	if parent != nil {
		k.Ancestors = append([]string{parent.Hash}, parent.Ancestors...)
		if pe := parent.ExpiresAt; pe != nil && (k.ExpiresAt == nil || k.ExpiresAt.After(*pe)) {
			t := pe.UTC()
			k.ExpiresAt = &t
		}
	}
	if err := a.Keys.PutKey(ctx, k); err != nil {
		return Key{}, "", Unavailable("storing the key", err)
	}
	return k, secret, nil
}

// parent returns user's key id, the parent of a key being made (nil for id ""), refusing one
// that is gone, expired or already at the end of the longest chain of keys.
func (a *KeyAdmin) parent(ctx context.Context, user, id string, now time.Time) (*Key, error) {
	if id == "" {
		return nil, nil
	}
	keys, err := a.Keys.ListKeys(ctx, user)
	if err != nil {
		return nil, Unavailable("reading the key that makes the new one", err)
	}
	i := slices.IndexFunc(keys, func(k Key) bool { return k.ID == id })
	switch {
	case i < 0:
		return nil, Errorf(KindUnauthorized, "the API key making this request has been revoked")
	case keys[i].ExpiresAt != nil && !now.Before(*keys[i].ExpiresAt):
		return nil, Errorf(KindUnauthorized, "the API key expired at %s", keys[i].ExpiresAt.UTC().Format(time.RFC3339))
	case len(keys[i].Ancestors) >= MaxKeyAncestors:
		return nil, Errorf(KindForbidden, "this key was made through %d keys, the most a chain may hold: make the new key with a key nearer the one the operator issued", len(keys[i].Ancestors))
	}
	return &keys[i], nil
}

func (a *KeyAdmin) endpoint(ctx context.Context, user, id string) (Endpoint, bool, error) {
	if a.Endpoints == nil || id == "" {
		return Endpoint{}, false, nil
	}
	return a.Endpoints.JobEndpoint(ctx, user, id)
}

// apply returns q with the change's windows set; with lowerOnly, a window may not rise (0, no
// limit, is the highest).
func (c *QuotaChange) apply(q Quota, lowerOnly bool) (Quota, error) {
	var errs []FieldError
	set := func(name string, dst *int, v *int) {
		switch {
		case v == nil:
		case *v < 0:
			errs = append(errs, FieldError{"$.quota." + name, "must not be negative"})
		case lowerOnly && *dst != 0 && (*v == 0 || *v > *dst):
			errs = append(errs, FieldError{"$.quota." + name, fmt.Sprintf("%d would raise the user's quota of %d requests a %s; a key may only lower it (the operator raises it with `gantry key create --data`)", *v, *dst, name)})
		default:
			*dst = *v
		}
	}
	set("minute", &q.Minute, c.Minute)
	set("hour", &q.Hour, c.Hour)
	set("day", &q.Day, c.Day)
	if len(errs) > 0 {
		e := Invalid(errs...)
		if lowerOnly {
			e.Kind = KindForbidden
		}
		return q, e
	}
	return q, nil
}

// List returns user's keys ("" = every user's), oldest first. A key that expired more than
// ExpiredGrace ago, or whose ancestor is gone (revoked while it was being made), is left out
// and deleted: the list shows what works, and lately expired keys, not every key ever made.
func (a *KeyAdmin) List(ctx context.Context, user string) ([]Key, error) {
	keys, err := a.Keys.ListKeys(ctx, user)
	if err != nil {
		return nil, Unavailable("listing the keys", err)
	}
	grace := a.ExpiredGrace
	if grace <= 0 {
		grace = DefaultExpiredKeyGrace
	}
	cutoff := a.Clock.Now().Add(-grace)
	present := make(map[string]bool, len(keys))
	for _, k := range keys {
		present[k.Hash] = true
	}
	live := keys[:0]
	var gone []Key
	for _, k := range keys {
		orphan := slices.ContainsFunc(k.Ancestors, func(h string) bool { return !present[h] })
		if orphan || k.ExpiresAt != nil && k.ExpiresAt.Before(cutoff) {
			gone = append(gone, k)
			continue
		}
		live = append(live, k)
	}
	for _, k := range gone {
		// Best effort: a key left behind is refused all the same, and the next list tries again.
		_, _ = a.Keys.DeleteKey(ctx, k.User, k.ID)
	}
	return live, nil
}

// Revoke deletes user's key id and every key made with it (and with those, and so on);
// KindNotFound when user has no such key.
func (a *KeyAdmin) Revoke(ctx context.Context, user, id string) (Key, error) {
	k, err := a.Keys.DeleteKey(ctx, user, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return Key{}, Errorf(KindNotFound, "user %s has no key %q (see GET /v2/keys)", user, id)
	case err != nil:
		return Key{}, Unavailable("revoking the key", err)
	}
	return k, nil
}
