package core

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Scope is what an API key may do.
type Scope string

// Key scopes.
const (
	ScopeAll  Scope = "all"  // everything the user may do
	ScopeRead Scope = "read" // reads only: management GETs, job status, stream and health
	ScopeJobs Scope = "jobs" // job operations only, optionally on listed endpoints
)

// ParseScope checks a scope name.
func ParseScope(s string) (Scope, error) {
	switch sc := Scope(s); sc {
	case ScopeAll, ScopeRead, ScopeJobs:
		return sc, nil
	}
	return "", fmt.Errorf("unknown scope %q (want all, read or jobs)", s)
}

// Access classifies an operation for scope checks.
type Access int

// Access classes.
const (
	ManageRead  Access = iota + 1 // management and catalog reads
	ManageWrite                   // management changes
	JobRead                       // job status, stream, health
	JobWrite                      // run, runsync, cancel, retry, purge-queue
)

// Key is a stored API key: only the SHA-256 of its secret is kept.
type Key struct {
	ID        string     `json:"id"`
	Hash      string     `json:"hash"` // hex SHA-256 of the secret
	User      string     `json:"user"`
	Scope     Scope      `json:"scope"`
	Endpoints []string   `json:"endpoints,omitempty"` // ScopeJobs: allowed endpoint ids; empty = all
	CreatedAt time.Time  `json:"createdAt"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// Ancestors are the hashes of the keys this key was made with over the API: its parent
	// first, then the parent's parent, and so on; empty for a key the operator made. The key
	// works only while every ancestor does: revoking one, or its expiry, ends it too.
	Ancestors []string `json:"ancestors,omitempty"`
}

// MaxKeyAncestors bounds a key's Ancestors: a key made through that many keys may make no
// more, so that checking a key costs a bounded number of (cached) lookups.
const MaxKeyAncestors = 8

// Quota is the number of requests a user may make per window; 0 = unlimited in that window.
type Quota struct {
	Minute int `json:"minute" yaml:"minute"`
	Hour   int `json:"hour" yaml:"hour"`
	Day    int `json:"day" yaml:"day"`
}

// User is a stored user. Quota, when set, replaces the server's default quota.
type User struct {
	Name      string    `json:"name"`
	Quota     *Quota    `json:"quota,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// KeyStore keeps users and keys. A call whose ctx is done returns an error that wraps ctx.Err()
// and writes nothing.
type KeyStore interface {
	LookupKey(ctx context.Context, hash string) (Key, error) // ErrNotFound
	PutKey(ctx context.Context, k Key) error
	// ListKeys returns the keys of user ("" = every user's), oldest first (by CreatedAt, then
	// ID): their hashes, never secrets.
	ListKeys(ctx context.Context, user string) ([]Key, error)
	// DeleteKey removes the key with the given id (not its hash) when it belongs to user (""
	// = any user), and every key of that user whose Ancestors hold its hash, and returns the
	// key named; ErrNotFound when there is no such key. Lookups of them in this process fail
	// at once; a caching store of another process may still answer from its cache for a
	// short while (keydir: 10 s).
	DeleteKey(ctx context.Context, user, id string) (Key, error)
	GetUser(ctx context.Context, name string) (User, error) // ErrNotFound
	PutUser(ctx context.Context, u User) error
}

// Principal is the authenticated caller of a request.
type Principal struct {
	User      string
	KeyID     string
	Scope     Scope
	Endpoints []string
	Quota     Quota
}

// Allows reports whether the principal's scope permits the access class.
func (p *Principal) Allows(a Access) bool {
	switch p.Scope {
	case ScopeAll:
		return true
	case ScopeRead:
		return a == ManageRead || a == JobRead
	case ScopeJobs:
		return a == JobRead || a == JobWrite
	}
	return false
}

// AllowsEndpoint reports whether the principal may run job operations on the endpoint.
func (p *Principal) AllowsEndpoint(id string) bool {
	return p.Scope != ScopeJobs || len(p.Endpoints) == 0 || slices.Contains(p.Endpoints, id)
}

// KeyPrefix starts every API key secret, so leaked keys are easy to recognise.
const KeyPrefix = "gk_"

// NewKeySecret returns a fresh random API key secret (160 bits).
func NewKeySecret() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return KeyPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

// HashKey returns the stored form of a key secret.
func HashKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// MissingKeyDetail is the one wording of a 401 for a key that is missing or malformed, on
// every route.
const MissingKeyDetail = `the API key is missing or malformed (expected "Authorization: Bearer <API_KEY>")`

// Authenticator turns a key secret into a Principal.
type Authenticator struct {
	Keys     KeyStore
	Defaults Quota // quota of users without their own
	Clock    Clock
}

// Authenticate checks a key secret: an unknown, malformed or expired key is KindUnauthorized,
// and so is a key made with a key that was revoked or has expired. A key store that cannot
// answer is KindUnavailable (503, Retry-After), as a rate limiter that cannot count is.
func (a *Authenticator) Authenticate(ctx context.Context, secret string) (Principal, error) {
	if secret == "" || len(secret) > 256 {
		return Principal{}, &Error{Kind: KindUnauthorized, Detail: MissingKeyDetail}
	}
	k, err := a.Keys.LookupKey(ctx, HashKey(secret))
	if errors.Is(err, ErrNotFound) {
		return Principal{}, Errorf(KindUnauthorized, "the API key is not valid")
	}
	if err != nil {
		return Principal{}, Unavailable("looking up the API key", err)
	}
	now := a.Clock.Now()
	if k.ExpiresAt != nil && !now.Before(*k.ExpiresAt) {
		return Principal{}, Errorf(KindUnauthorized, "the API key expired at %s", k.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if err := a.checkAncestors(ctx, k, now); err != nil {
		return Principal{}, err
	}
	p := Principal{User: k.User, KeyID: k.ID, Scope: k.Scope, Endpoints: k.Endpoints, Quota: a.Defaults}
	u, err := a.Keys.GetUser(ctx, k.User)
	switch {
	case err == nil && u.Quota != nil:
		p.Quota = *u.Quota
	case err != nil && !errors.Is(err, ErrNotFound):
		return Principal{}, Unavailable("looking up the key's user", err)
	}
	return p, nil
}

// checkAncestors refuses k unless every key it was made with is still there and unexpired: a
// child never outlives its parent, even one revoked while the child was being made (which the
// revocation's own sweep of the children may miss).
func (a *Authenticator) checkAncestors(ctx context.Context, k Key, now time.Time) error {
	if len(k.Ancestors) > MaxKeyAncestors {
		return Errorf(KindUnauthorized, "the API key is not valid: it was made through more than %d keys", MaxKeyAncestors)
	}
	for _, hash := range k.Ancestors {
		anc, err := a.Keys.LookupKey(ctx, hash)
		switch {
		case errors.Is(err, ErrNotFound):
			return Errorf(KindUnauthorized, "the API key is not valid: a key it was made with has been revoked")
		case err != nil:
			return Unavailable("looking up the key the API key was made with", err)
		case anc.ExpiresAt != nil && !now.Before(*anc.ExpiresAt):
			return Errorf(KindUnauthorized, "the API key expired at %s, with the key %s it was made with",
				anc.ExpiresAt.UTC().Format(time.RFC3339), anc.ID)
		}
	}
	return nil
}
