package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/startstop"
)

// keysChannel is the NOTIFY channel a change to a key or user is announced on: "k:<hash>" or
// "u:<name>". Every write of a key or user (PutKey, DeleteKey, PutUser, from any replica or
// from `gantry keys`) sends one in its own transaction.
const keysChannel = "gantry_keys"

// keyCacheTTL bounds how long a cached key or user is trusted without a word from
// PostgreSQL: through a transaction-pooling proxy, where LISTEN hears nothing, a revoked key
// stops working within it (as the embedded store's keydir does).
const keyCacheTTL = 10 * time.Second

// keyCacheMax bounds the entries of each of the cache's maps; past it the map starts afresh.
const keyCacheMax = 100_000

// KeyCache is the core.KeyStore a replica authenticates requests with: the keys and users of
// db, kept in memory once read, so that an authenticated request costs PostgreSQL nothing
// (a /run read the key and the key's user: two of the four statements a job cost). A change
// made anywhere is announced on keysChannel, and each replica's cache LISTENs and forgets the
// entry at once; while it is not listening (connecting again) it keeps nothing.
//
// The maps are plain maps under one lock, not a ristretto cache: a lookup must never store an
// answer read before a change that the cache has already heard of, and the generation check
// that guarantees it (get) needs the store and the check to be one step.
type KeyCache struct {
	db  *DB
	log *slog.Logger
	now func() time.Time

	mu        sync.RWMutex
	gen       uint64 // changes heard so far: a lookup keeps its answer only if none came meanwhile
	listening bool   // the LISTEN connection is up: entries may be kept
	keys      map[string]cachedEntry[core.Key]
	users     map[string]cachedEntry[core.User]

	group startstop.Group // follow, between Start and Stop
}

type cachedEntry[T any] struct {
	v  T
	at time.Time
}

// KeyCache makes a cache of db's keys and users; it keeps nothing until Start. log, when not
// nil, hears of a lost LISTEN connection.
func (db *DB) KeyCache(log *slog.Logger) *KeyCache {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &KeyCache{db: db, log: log, now: time.Now, keys: map[string]cachedEntry[core.Key]{},
		users: map[string]cachedEntry[core.User]{}}
}

// Start follows the changes of keys and users, until ctx ends or Stop. Until it listens, and
// after Stop, the cache keeps nothing: every lookup reads the store.
func (c *KeyCache) Start(ctx context.Context) error {
	if _, err := c.group.Begin(ctx); err != nil {
		return fmt.Errorf("postgres: starting the key cache: %w", err)
	}
	c.group.Go(c.follow)
	return nil
}

// Stop stops following the changes and waits until the cache has forgotten everything.
func (c *KeyCache) Stop() { c.group.Stop() }

// follow forgets what each announcement names; when announcements may have been missed (at
// each connection) it forgets everything.
func (c *KeyCache) follow(ctx context.Context) {
	defer c.setListening(false)
	c.db.follow(ctx, keysChannel, 0, c.log, func(_ context.Context, payload string, caught bool) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.gen++
		switch kind, name, _ := strings.Cut(payload, ":"); {
		case !caught:
			c.listening = true
			clear(c.keys)
			clear(c.users)
		case kind == "k":
			delete(c.keys, name)
		case kind == "u":
			delete(c.users, name)
		default: // a payload this version does not know: forget everything
			clear(c.keys)
			clear(c.users)
		}
		return nil
	})
}

// setListening records whether announcements arrive; without them nothing is kept.
func (c *KeyCache) setListening(on bool) {
	c.mu.Lock()
	c.gen++
	c.listening = on
	clear(c.keys)
	clear(c.users)
	c.mu.Unlock()
}

// get answers from m when it holds a fresh entry, else reads it with read and keeps it unless
// a change was heard meanwhile. Misses (ErrNotFound) are not kept: a new key works at once.
func get[T any](c *KeyCache, m map[string]cachedEntry[T], name string, read func() (T, error)) (T, error) {
	now := c.now()
	c.mu.RLock()
	e, ok := m[name]
	gen, listening := c.gen, c.listening
	c.mu.RUnlock()
	if ok && now.Sub(e.at) < keyCacheTTL {
		return e.v, nil
	}
	v, err := read()
	if err != nil || !listening {
		return v, err
	}
	c.mu.Lock()
	if c.gen == gen && c.listening {
		if len(m) >= keyCacheMax {
			clear(m)
		}
		m[name] = cachedEntry[T]{v: v, at: now}
	}
	c.mu.Unlock()
	return v, nil
}

// LookupKey implements core.KeyStore, from the cache when it can.
func (c *KeyCache) LookupKey(ctx context.Context, hash string) (core.Key, error) {
	return get(c, c.keys, hash, func() (core.Key, error) { return c.db.LookupKey(ctx, hash) })
}

// GetUser implements core.KeyStore, from the cache when it can.
func (c *KeyCache) GetUser(ctx context.Context, name string) (core.User, error) {
	return get(c, c.users, name, func() (core.User, error) { return c.db.GetUser(ctx, name) })
}

// PutKey implements core.KeyStore; every replica's cache hears of it, this one at once.
func (c *KeyCache) PutKey(ctx context.Context, k core.Key) error {
	defer c.forget("k", k.Hash)
	return c.db.PutKey(ctx, k)
}

// ListKeys implements core.KeyStore (never cached).
func (c *KeyCache) ListKeys(ctx context.Context, user string) ([]core.Key, error) {
	return c.db.ListKeys(ctx, user)
}

// DeleteKey implements core.KeyStore; every replica's cache hears of it and of the keys made
// with it, this one at once.
func (c *KeyCache) DeleteKey(ctx context.Context, user, id string) (core.Key, error) {
	k, children, err := c.db.deleteKey(ctx, user, id)
	if err == nil {
		c.forget("k", k.Hash)
		for _, h := range children {
			c.forget("k", h)
		}
	}
	return k, err
}

// PutUser implements core.KeyStore; every replica's cache hears of it, this one at once.
func (c *KeyCache) PutUser(ctx context.Context, u core.User) error {
	defer c.forget("u", u.Name)
	return c.db.PutUser(ctx, u)
}

// forget drops an entry this process changed, without waiting for the announcement: a lookup
// here after the change returns never sees the old entry.
func (c *KeyCache) forget(kind, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if kind == "k" {
		delete(c.keys, name)
	} else {
		delete(c.users, name)
	}
}

var _ core.KeyStore = (*KeyCache)(nil)
