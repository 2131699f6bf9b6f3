package memory

import (
	"context"
	"encoding/json"
	"slices"

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

// ListKeys returns the keys of user ("" = every user's), oldest first.
func (s *Store) ListKeys(ctx context.Context, user string) ([]core.Key, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := []core.Key{}
	for _, b := range s.keys {
		var k core.Key
		if err := json.Unmarshal(b, &k); err != nil {
			return nil, err
		}
		if user == "" || k.User == user {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b core.Key) int { return compare(a.CreatedAt, a.ID, b.CreatedAt, b.ID) })
	return keys, nil
}

// DeleteKey removes the key with the given id when it is user's ("" = anyone's), and the
// keys of that user made with it (their Ancestors hold its hash).
func (s *Store) DeleteKey(ctx context.Context, user, id string) (core.Key, error) {
	if err := ctx.Err(); err != nil {
		return core.Key{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make(map[string]core.Key, len(s.keys))
	var named *core.Key
	for hash, b := range s.keys {
		var k core.Key
		if err := json.Unmarshal(b, &k); err != nil {
			return core.Key{}, err
		}
		keys[hash] = k
		if k.ID == id && (user == "" || k.User == user) {
			named = &k
		}
	}
	if named == nil {
		return core.Key{}, core.ErrNotFound
	}
	for hash, k := range keys {
		if hash == named.Hash || k.User == named.User && slices.Contains(k.Ancestors, named.Hash) {
			delete(s.keys, hash)
		}
	}
	return *named, nil
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
