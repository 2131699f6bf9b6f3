package keydir_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/store/keydir"
)

// setup opens a Dir on a fresh root and closes it when the test ends.
func setup(t *testing.T) (*keydir.Dir, string) {
	t.Helper()
	root := t.TempDir()
	return open(t, root), root
}

func open(t *testing.T, root string) *keydir.Dir {
	t.Helper()
	d, err := keydir.Open(root)
	if err != nil {
		t.Fatalf("Open(%q) = %v; want nil", root, err)
	}
	t.Cleanup(d.Close)
	return d
}

// The KeyStore suite runs on Dir in the embedded backend's storetest.RunAll (store/pebble's
// TestStores), where the server opens it beside Pebble.

var created = time.Date(2025, time.April, 1, 9, 30, 0, 0, time.UTC)

func newKey(user string) (core.Key, string) {
	secret := core.NewKeySecret()
	expires := created.Add(30 * 24 * time.Hour)
	return core.Key{
		ID:        core.NewID(8),
		Hash:      core.HashKey(secret),
		User:      user,
		Scope:     core.ScopeJobs,
		Endpoints: []string{"ep1", "ep2"},
		CreatedAt: created,
		ExpiresAt: &expires,
	}, secret
}

// sameKey reports whether two keys are equal, comparing times with Equal.
func sameKey(got, want core.Key) bool {
	if !got.CreatedAt.Equal(want.CreatedAt) || (got.ExpiresAt == nil) != (want.ExpiresAt == nil) ||
		(got.ExpiresAt != nil && !got.ExpiresAt.Equal(*want.ExpiresAt)) {
		return false
	}
	got.CreatedAt, got.ExpiresAt = want.CreatedAt, want.ExpiresAt
	return reflect.DeepEqual(got, want)
}

func TestPutKeyRejectsMalformedHash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, root := setup(t)
	for _, hash := range []string{"", "abc", strings.Repeat("G", 64), "../" + strings.Repeat("a", 61)} {
		k, _ := newKey("alice")
		k.Hash = hash
		if err := d.PutKey(ctx, k); err == nil {
			t.Errorf("PutKey(hash %q) = nil; want an error", hash)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "keys")); len(entries) != 0 {
		t.Errorf("keys/ after rejected puts holds %d entries; want 0", len(entries))
	}
}

func TestPutUserRejectsInvalidName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, root := setup(t)
	for _, name := range []string{"", ".", "..", "../evil", "a/b", ".hidden", "-dash", "_under", "with space", "tab\t", "ünïcode", strings.Repeat("a", 65)} {
		if err := d.PutUser(ctx, core.User{Name: name}); err == nil {
			t.Errorf("PutUser(%q) = nil; want an error", name)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "users")); len(entries) != 0 {
		t.Errorf("users/ after rejected puts holds %d entries; want 0", len(entries))
	}
	if entries, _ := os.ReadDir(root); len(entries) != 2 {
		t.Errorf("the root after rejected puts holds %d entries; want 2 (keys/, users/)", len(entries))
	}
}

// TestSecondDirSeesNewKey is `gantry keys create` (one Dir) adding a key while `gantry serve`
// (another Dir on the same root, which already missed the key once) runs.
func TestSecondDirSeesNewKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	server := open(t, root)
	k, _ := newKey("alice")
	if _, err := server.LookupKey(ctx, k.Hash); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("server LookupKey(%q) before create err = %v; want core.ErrNotFound", k.Hash, err)
	}
	if _, err := server.GetUser(ctx, "alice"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("server GetUser(%q) before create err = %v; want core.ErrNotFound", "alice", err)
	}

	cli := open(t, root)
	u := core.User{Name: "alice", Quota: &core.Quota{Minute: 7}, CreatedAt: created}
	if err := cli.PutUser(ctx, u); err != nil {
		t.Fatalf("cli PutUser(%q) = %v; want nil", u.Name, err)
	}
	if err := cli.PutKey(ctx, k); err != nil {
		t.Fatalf("cli PutKey(%q) = %v; want nil", k.ID, err)
	}

	got, err := server.LookupKey(ctx, k.Hash)
	if err != nil || !sameKey(got, k) {
		t.Errorf("server LookupKey(%q) = %+v, %v; want %+v, nil", k.Hash, got, err, k)
	}
	gotU, err := server.GetUser(ctx, "alice")
	if err != nil || !reflect.DeepEqual(gotU.Quota, u.Quota) {
		t.Errorf("server GetUser(%q) = %+v, %v; want %+v, nil", "alice", gotU, err, u)
	}
}

func TestFilesPrivateAndHashOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, root := setup(t)
	k, secret := newKey("alice")
	if err := d.PutKey(ctx, k); err != nil {
		t.Fatalf("PutKey(%q) = %v; want nil", k.ID, err)
	}
	if err := d.PutUser(ctx, core.User{Name: "alice", Quota: &core.Quota{Minute: 1}}); err != nil {
		t.Fatalf("PutUser(%q) = %v; want nil", "alice", err)
	}
	if _, err := os.Stat(filepath.Join(root, "keys", k.Hash+".json")); err != nil {
		t.Errorf("Stat(keys/<hash>.json) = %v; want the key stored under its hash", err)
	}
	if _, err := os.Stat(filepath.Join(root, "users", "alice.json")); err != nil {
		t.Errorf("Stat(users/alice.json) = %v; want the user stored under its name", err)
	}
	var files int
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if e.IsDir() {
			if rel != "." && info.Mode().Perm()&0o077 != 0 {
				t.Errorf("directory %s has mode %v; want no group or other access", rel, info.Mode().Perm())
			}
			return nil
		}
		files++
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", rel)
		}
		if got := info.Mode().Perm(); got != 0o600 {
			t.Errorf("file %s has mode %v; want %v", rel, got, fs.FileMode(0o600))
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), secret) || strings.Contains(string(b), strings.TrimPrefix(secret, core.KeyPrefix)) {
			t.Errorf("file %s contains the key secret", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("WalkDir(%q) = %v", root, err)
	}
	if files != 2 {
		t.Errorf("the directory holds %d files; want 2 (one key, one user)", files)
	}
}

func TestAuthenticator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, root := setup(t)
	now := created.Add(24 * time.Hour)
	defaults := core.Quota{Minute: 100, Hour: 1000, Day: 5000}
	a := &core.Authenticator{Keys: d, Defaults: defaults, Clock: testkit.NewClock(now)}

	put := func(k core.Key) {
		t.Helper()
		if err := d.PutKey(ctx, k); err != nil {
			t.Fatalf("PutKey(%q) = %v; want nil", k.ID, err)
		}
	}
	putUser := func(u core.User) {
		t.Helper()
		if err := d.PutUser(ctx, u); err != nil {
			t.Fatalf("PutUser(%q) = %v; want nil", u.Name, err)
		}
	}
	at := func(offset time.Duration) *time.Time { when := now.Add(offset); return &when }

	// alice has her own quota; bob's user record has none; carol has no user record; dave's own
	// quota is all zeros (unlimited).
	aliceQuota := core.Quota{Minute: 5, Hour: 50, Day: 0}
	putUser(core.User{Name: "alice", Quota: &aliceQuota})
	putUser(core.User{Name: "bob"})
	putUser(core.User{Name: "dave", Quota: &core.Quota{}})

	aliceKey, aliceSecret := newKey("alice")
	aliceKey.ExpiresAt = at(time.Second) // expires a second from now
	put(aliceKey)
	bobKey, bobSecret := newKey("bob")
	bobKey.Scope, bobKey.Endpoints, bobKey.ExpiresAt = core.ScopeRead, nil, nil
	put(bobKey)
	carolKey, carolSecret := newKey("carol")
	carolKey.Scope, carolKey.Endpoints, carolKey.ExpiresAt = core.ScopeAll, nil, nil
	put(carolKey)
	daveKey, daveSecret := newKey("dave")
	put(daveKey)
	expiredKey, expiredSecret := newKey("alice")
	expiredKey.ExpiresAt = at(-time.Nanosecond)
	put(expiredKey)
	nowKey, nowSecret := newKey("alice")
	nowKey.ExpiresAt = at(0) // expires exactly now
	put(nowKey)
	brokenSecret := core.NewKeySecret()
	if err := os.WriteFile(filepath.Join(root, "keys", core.HashKey(brokenSecret)+".json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}

	ok := []struct {
		name, secret string
		want         core.Principal
	}{
		{"own quota", aliceSecret, core.Principal{User: "alice", KeyID: aliceKey.ID, Scope: core.ScopeJobs, Endpoints: []string{"ep1", "ep2"}, Quota: aliceQuota}},
		{"user without quota", bobSecret, core.Principal{User: "bob", KeyID: bobKey.ID, Scope: core.ScopeRead, Quota: defaults}},
		{"no user record", carolSecret, core.Principal{User: "carol", KeyID: carolKey.ID, Scope: core.ScopeAll, Quota: defaults}},
		{"own unlimited quota", daveSecret, core.Principal{User: "dave", KeyID: daveKey.ID, Scope: core.ScopeJobs, Endpoints: []string{"ep1", "ep2"}, Quota: core.Quota{}}},
	}
	for _, tt := range ok {
		got, err := a.Authenticate(ctx, tt.secret)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Authenticate(%s) = %+v, %v; want %+v, nil", tt.name, got, err, tt.want)
		}
	}

	refused := []struct {
		name, secret string
		want         core.Kind
	}{
		{"empty", "", core.KindUnauthorized},
		{"unknown", core.NewKeySecret(), core.KindUnauthorized},
		{"too long", core.KeyPrefix + strings.Repeat("a", 300), core.KindUnauthorized},
		{"hash instead of secret", aliceKey.Hash, core.KindUnauthorized},
		{"expired", expiredSecret, core.KindUnauthorized},
		{"expiring now", nowSecret, core.KindUnauthorized},
		// A store that cannot answer is an outage, as for the rate limiter: 503, Retry-After.
		{"unreadable key file", brokenSecret, core.KindUnavailable},
	}
	for _, tt := range refused {
		p, err := a.Authenticate(ctx, tt.secret)
		if err == nil || core.KindOf(err) != tt.want {
			t.Errorf("Authenticate(%s) = %+v, %v (kind %v); want kind %v", tt.name, p, err, core.KindOf(err), tt.want)
		}
	}
}

func TestListAndDeleteKeys(t *testing.T) {
	t.Parallel()
	d, err := keydir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"k2", "k1", "k3"} {
		secret := core.NewKeySecret()
		k := core.Key{ID: id, Hash: core.HashKey(secret), User: "u", Scope: core.ScopeAll, CreatedAt: base.Add(time.Duration([]int{2, 1, 3}[i]) * time.Hour)}
		if err := d.PutKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := d.ListKeys(ctx, "")
	var ids []string
	for _, k := range keys {
		ids = append(ids, k.ID)
	}
	if err != nil || strings.Join(ids, ",") != "k1,k2,k3" {
		t.Fatalf("ListKeys = %v, %v; want k1,k2,k3 (oldest first)", ids, err)
	}
	hash := keys[0].Hash
	if _, err := d.LookupKey(ctx, hash); err != nil { // now cached
		t.Fatal(err)
	}
	if _, err := d.DeleteKey(ctx, "", "k1"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.LookupKey(ctx, hash); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("LookupKey after DeleteKey = %v; want ErrNotFound (no stale cache hit)", err)
	}
	if _, err := d.DeleteKey(ctx, "", "k1"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("second DeleteKey = %v; want ErrNotFound", err)
	}
}
