package memory

import (
	"context"
	"encoding/json"

	"github.com/gantryhq/gantry/core"
)

// LookupKey returns the key whose secret hashes to hash.
func (s *Store) LookupKey(ctx context.Context, hash string) (core.Key, error) {
	var k core.Key
	return k, s.read(ctx, s.keys, hash, &k)
}

// PutKey stores a key, replacing one with the same hash.
func (s *Store) PutKey(ctx context.Context, k core.Key) error {
	return s.write(ctx, s.keys, k.Hash, k)
}

// GetUser reads a user.
func (s *Store) GetUser(ctx context.Context, name string) (core.User, error) {
	var u core.User
	return u, s.read(ctx, s.users, name, &u)
}

// PutUser stores a user, replacing one with the same name.
func (s *Store) PutUser(ctx context.Context, u core.User) error {
	return s.write(ctx, s.users, u.Name, u)
}

// read decodes m[key] into v, or returns core.ErrNotFound.
func (s *Store) read(ctx context.Context, m map[string][]byte, key string, v any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	b, ok := m[key]
	s.mu.Unlock()
	if !ok {
		return core.ErrNotFound
	}
	return json.Unmarshal(b, v)
}

// write stores v, encoded, as m[key].
func (s *Store) write(ctx context.Context, m map[string][]byte, key string, v any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m[key] = b
	return nil
}

var _ core.KeyStore = (*Store)(nil)
