package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/gantryhq/gantry/core"
)

// Keys and users are read with one indexed lookup each; a replica serves requests through a
// KeyCache (keycache.go). Every write announces itself on keysChannel in the same statement,
// so that a key revoked or narrowed on any replica (or by `gantry keys revoke`) stops working
// at once on every replica.

// LookupKey returns the key whose secret hashes to hash.
func (db *DB) LookupKey(ctx context.Context, hash string) (core.Key, error) {
	var k core.Key
	var body []byte
	err := db.q(ctx).QueryRow(ctx, `SELECT body FROM gantry_keys WHERE hash = $1`, hash).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return k, core.ErrNotFound
	}
	if err != nil {
		return k, fmt.Errorf("looking up a key: %w", err)
	}
	if err := json.Unmarshal(body, &k); err != nil {
		return k, fmt.Errorf("decoding a key: %w", err)
	}
	return k, nil
}

// PutKey stores a key under its hash, replacing the key of that hash.
func (db *DB) PutKey(ctx context.Context, k core.Key) error {
	body, err := json.Marshal(k)
	if err != nil {
		return err
	}
	_, err = db.q(ctx).Exec(ctx, `WITH w AS (
		INSERT INTO gantry_keys (hash, id, user_name, created_at, body) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (hash) DO UPDATE SET id = excluded.id, user_name = excluded.user_name,
			created_at = excluded.created_at, body = excluded.body
		RETURNING hash)
		SELECT pg_notify('`+keysChannel+`', 'k:' || hash) FROM w`,
		k.Hash, k.ID, k.User, k.CreatedAt, body)
	if err != nil {
		return fmt.Errorf("storing key %s: %w", k.ID, err)
	}
	return nil
}

// ListKeys returns the keys of user ("" = every user's), oldest first, then by id.
func (db *DB) ListKeys(ctx context.Context, user string) ([]core.Key, error) {
	rows, err := db.q(ctx).Query(ctx, `SELECT body FROM gantry_keys WHERE $1 = '' OR user_name = $1 ORDER BY created_at, id`, user)
	if err != nil {
		return nil, fmt.Errorf("listing keys: %w", err)
	}
	keys := []core.Key{}
	var body []byte
	_, err = pgx.ForEachRow(rows, []any{&body}, func() error {
		var k core.Key
		if err := json.Unmarshal(body, &k); err != nil {
			return fmt.Errorf("decoding a key: %w", err)
		}
		keys = append(keys, k)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing keys: %w", err)
	}
	return keys, nil
}

// DeleteKey removes the key with the given id when it belongs to user ("" = any user), and
// the keys of that user made with it (their ancestors hold its hash), in one statement, and
// returns it. Every replica refuses them from the next request on.
func (db *DB) DeleteKey(ctx context.Context, user, id string) (core.Key, error) {
	k, _, err := db.deleteKey(ctx, user, id)
	return k, err
}

// deleteKey is DeleteKey, returning also the hashes of the keys made with it that went too.
func (db *DB) deleteKey(ctx context.Context, user, id string) (core.Key, []string, error) {
	var k core.Key
	rows, err := db.q(ctx).Query(ctx, `WITH t AS (
			SELECT hash, user_name FROM gantry_keys WHERE id = $1 AND ($2 = '' OR user_name = $2)
			ORDER BY created_at LIMIT 1),
		d AS (
			DELETE FROM gantry_keys k USING t
			WHERE k.hash = t.hash OR (k.user_name = t.user_name AND k.body->'ancestors' ? t.hash)
			RETURNING k.hash, k.body, k.hash = t.hash AS named)
		SELECT hash, body, named, pg_notify('`+keysChannel+`', 'k:' || hash)::text FROM d`, id, user)
	if err != nil {
		return k, nil, fmt.Errorf("deleting key %s: %w", id, err)
	}
	var (
		hash, announced string
		body            []byte
		named, found    bool
		children        []string
	)
	_, err = pgx.ForEachRow(rows, []any{&hash, &body, &named, &announced}, func() error {
		if !named {
			children = append(children, hash)
			return nil
		}
		found = true
		return json.Unmarshal(body, &k)
	})
	switch {
	case err != nil:
		return k, nil, fmt.Errorf("deleting key %s: %w", id, err)
	case !found:
		return k, nil, core.ErrNotFound
	}
	return k, children, nil
}

// GetUser reads a user.
func (db *DB) GetUser(ctx context.Context, name string) (core.User, error) {
	var u core.User
	var body []byte
	err := db.q(ctx).QueryRow(ctx, `SELECT body FROM gantry_users WHERE name = $1`, name).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return u, core.ErrNotFound
	}
	if err != nil {
		return u, fmt.Errorf("reading user %s: %w", name, err)
	}
	if err := json.Unmarshal(body, &u); err != nil {
		return u, fmt.Errorf("decoding user %s: %w", name, err)
	}
	return u, nil
}

// PutUser stores a user.
func (db *DB) PutUser(ctx context.Context, u core.User) error {
	body, err := json.Marshal(u)
	if err != nil {
		return err
	}
	_, err = db.q(ctx).Exec(ctx, `WITH w AS (
		INSERT INTO gantry_users (name, body) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET body = excluded.body
		RETURNING name)
		SELECT pg_notify('`+keysChannel+`', 'u:' || name) FROM w`, u.Name, body)
	if err != nil {
		return fmt.Errorf("storing user %s: %w", u.Name, err)
	}
	return nil
}

var _ core.KeyStore = (*DB)(nil)
