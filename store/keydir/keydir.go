// Package keydir keeps API keys and users as small JSON files in a directory: keys/<sha256>.json
// and users/<name>.json. Files rather than the Pebble store so that `gantry keys create` can add
// a key while `gantry serve` holds the store open; the server finds a new key on its first use.
// Only hashes of key secrets are written. Lookups are cached briefly (ristretto).
package keydir

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/gantryhq/gantry/core"
)

// cacheTTL bounds how long a cached key or user is trusted; a revoked key stops working
// within it.
const cacheTTL = 10 * time.Second

// Dir is a key and user directory.
type Dir struct {
	root  string
	keys  *ristretto.Cache[string, core.Key]
	users *ristretto.Cache[string, core.User]
}

var (
	hashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	// NameRE is the form of a user name.
	NameRE = core.UserNameRE
)

// Open opens (creating if needed) the directory root.
func Open(root string) (*Dir, error) {
	for _, sub := range []string{"keys", "users"} {
		if err := os.MkdirAll(filepath.Join(root, sub), 0o700); err != nil {
			return nil, fmt.Errorf("creating %s: %w", sub, err)
		}
	}
	keys, err := ristretto.NewCache(&ristretto.Config[string, core.Key]{NumCounters: 1e5, MaxCost: 1e4, BufferItems: 64})
	if err != nil {
		return nil, err
	}
	users, err := ristretto.NewCache(&ristretto.Config[string, core.User]{NumCounters: 1e5, MaxCost: 1e4, BufferItems: 64})
	if err != nil {
		return nil, err
	}
	return &Dir{root: root, keys: keys, users: users}, nil
}

// Close releases the caches.
func (d *Dir) Close() {
	d.keys.Close()
	d.users.Close()
}

// LookupKey returns the key whose secret hashes to hash.
func (d *Dir) LookupKey(ctx context.Context, hash string) (core.Key, error) {
	if err := ctx.Err(); err != nil {
		return core.Key{}, err
	}
	if k, ok := d.keys.Get(hash); ok { // only checked hashes are cached
		return k, nil
	}
	if !hashRE.MatchString(hash) {
		return core.Key{}, core.ErrNotFound
	}
	var k core.Key
	if err := readJSON(filepath.Join(d.root, "keys", hash+".json"), &k); err != nil {
		return core.Key{}, err
	}
	d.keys.SetWithTTL(hash, k, 1, cacheTTL)
	return k, nil
}

// PutKey writes a key. The cached copy of an older version goes once it is written, so a key
// narrowed or expired through this Dir changes at once (other processes see it within
// cacheTTL).
func (d *Dir) PutKey(ctx context.Context, k core.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !hashRE.MatchString(k.Hash) {
		return fmt.Errorf("key hash %q is not a hex SHA-256", k.Hash)
	}
	err := writeJSON(filepath.Join(d.root, "keys", k.Hash+".json"), k)
	d.keys.Del(k.Hash)
	return err
}

// ListKeys returns the keys of user ("" = every user's), oldest first (hashes, never
// secrets).
func (d *Dir) ListKeys(ctx context.Context, user string) ([]core.Key, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(d.root, "keys"))
	if err != nil {
		return nil, err
	}
	keys := []core.Key{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !hashRE.MatchString(name) {
			continue
		}
		var k core.Key
		if err := readJSON(filepath.Join(d.root, "keys", e.Name()), &k); errors.Is(err, core.ErrNotFound) {
			continue // deleted while listing
		} else if err != nil {
			return nil, fmt.Errorf("reading key %s: %w", name, err)
		}
		if user == "" || k.User == user {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b core.Key) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return keys, nil
}

// DeleteKey removes the key with the given id (not its secret: the id `gantry key list`
// shows) when it is user's ("" = anyone's), then the keys made with it (their Ancestors hold
// its hash). The key itself goes first: its children are refused from then on (core checks a
// key's ancestors), even if removing them fails. Another process's Dir (a running server)
// stops accepting them within its cache's 10 s.
func (d *Dir) DeleteKey(ctx context.Context, user, id string) (core.Key, error) {
	keys, err := d.ListKeys(ctx, user)
	if err != nil {
		return core.Key{}, err
	}
	i := slices.IndexFunc(keys, func(k core.Key) bool { return k.ID == id })
	if i < 0 {
		return core.Key{}, core.ErrNotFound
	}
	k := keys[i]
	if err := d.removeKey(k.Hash); errors.Is(err, fs.ErrNotExist) {
		return core.Key{}, core.ErrNotFound
	} else if err != nil {
		return core.Key{}, err
	}
	for _, c := range keys {
		if c.User == k.User && slices.Contains(c.Ancestors, k.Hash) {
			if err := d.removeKey(c.Hash); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return k, fmt.Errorf("removing key %s, made with %s: %w", c.ID, k.ID, err)
			}
		}
	}
	return k, nil
}

// removeKey removes the file of the key hash, and its cached copy.
func (d *Dir) removeKey(hash string) error {
	err := os.Remove(filepath.Join(d.root, "keys", hash+".json"))
	d.keys.Del(hash)
	return err
}

// GetUser reads a user.
func (d *Dir) GetUser(ctx context.Context, name string) (core.User, error) {
	if err := ctx.Err(); err != nil {
		return core.User{}, err
	}
	if u, ok := d.users.Get(name); ok { // only checked names are cached
		return u, nil
	}
	if !NameRE.MatchString(name) {
		return core.User{}, core.ErrNotFound
	}
	var u core.User
	if err := readJSON(filepath.Join(d.root, "users", name+".json"), &u); err != nil {
		return core.User{}, err
	}
	d.users.SetWithTTL(name, u, 1, cacheTTL)
	return u, nil
}

// PutUser writes a user. Like PutKey, it drops the cached copy once the user is written.
func (d *Dir) PutUser(ctx context.Context, u core.User) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !NameRE.MatchString(u.Name) {
		return fmt.Errorf("user name %q must match %s", u.Name, NameRE)
	}
	err := writeJSON(filepath.Join(d.root, "users", u.Name+".json"), u)
	d.users.Del(u.Name)
	return err
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return core.ErrNotFound
	}
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// writeJSON writes v durably and atomically: a synced temporary file renamed into place.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }() // no-op once renamed
	if _, err := f.Write(append(b, '\n')); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o600); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer func() { _ = dir.Close() }()
	return dir.Sync()
}

var _ core.KeyStore = (*Dir)(nil)
