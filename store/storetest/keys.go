package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// RunKeyStore runs the conformance suite of core.KeyStore: API keys, found by the hash of their
// secret, and users. Hashes are of the form core.HashKey makes; user names are valid ones.
func RunKeyStore(t *testing.T, open Opener[core.KeyStore]) {
	t.Helper()
	ctx := context.Background()
	// sampleKey returns a key of user with every field set; the secret is derived from id.
	sampleKey := func(id, user string) core.Key {
		expires := base.Add(30 * 24 * time.Hour)
		return core.Key{
			ID: id, Hash: core.HashKey("gk_secret_" + id), User: user, Scope: core.ScopeJobs,
			Endpoints: []string{"ep1", "ep2"}, CreatedAt: base, ExpiresAt: &expires,
			Ancestors: []string{core.HashKey("gk_parent_" + id), core.HashKey("gk_grandparent_" + id)},
		}
	}
	sampleUser := func(name string) core.User {
		return core.User{Name: name, Quota: &core.Quota{Minute: 60, Hour: 1000, Day: 10_000}, CreatedAt: base}
	}
	putKey := func(t *testing.T, st core.KeyStore, k core.Key) {
		t.Helper()
		if err := st.PutKey(ctx, k); err != nil {
			t.Fatalf("PutKey(%q) = %v; want nil", k.ID, err)
		}
	}
	putUser := func(t *testing.T, st core.KeyStore, u core.User) {
		t.Helper()
		if err := st.PutUser(ctx, u); err != nil {
			t.Fatalf("PutUser(%q) = %v; want nil", u.Name, err)
		}
	}
	// lookup checks that hash finds want, more than once: a store that caches answers the
	// later lookups from its cache.
	lookup := func(t *testing.T, st core.KeyStore, want core.Key, when string) {
		t.Helper()
		for i := range 3 {
			got, err := st.LookupKey(ctx, want.Hash)
			if err != nil || !sameKey(got, want) {
				t.Fatalf("LookupKey(%s) %s, lookup %d = %+v, %v; want %+v, nil", want.ID, when, i+1, got, err, want)
			}
		}
	}
	getUser := func(t *testing.T, st core.KeyStore, want core.User, when string) {
		t.Helper()
		for i := range 3 {
			got, err := st.GetUser(ctx, want.Name)
			if err != nil || !sameUser(got, want) {
				t.Fatalf("GetUser(%q) %s, read %d = %+v, %v; want %+v, nil", want.Name, when, i+1, got, err, want)
			}
		}
	}

	t.Run("KeyRoundTrip", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		full := sampleKey("k1", "alice")
		bare := core.Key{ID: "k2", Hash: core.HashKey("gk_bare"), User: "alice", Scope: core.ScopeAll, CreatedAt: base.Add(time.Second)}
		putKey(t, st, full)
		putKey(t, st, bare)
		lookup(t, st, full, "")
		lookup(t, st, bare, "") // no endpoints and no expiry stay so
	})

	t.Run("KeyNotFound", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		k := sampleKey("k1", "alice")
		putKey(t, st, k)
		for _, hash := range []string{
			core.HashKey("gk_unknown"), "", k.Hash[:63], k.Hash + "0", strings.ToUpper(k.Hash),
			strings.Repeat("g", 64), "../users/alice", "k1", "gk_secret_k1",
		} {
			if _, err := st.LookupKey(ctx, hash); !errors.Is(err, core.ErrNotFound) {
				t.Errorf("LookupKey(%q) err = %v; want core.ErrNotFound", hash, err)
			}
		}
	})

	t.Run("KeyOverwrite", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		k := sampleKey("k1", "alice")
		putKey(t, st, k)
		lookup(t, st, k, "before the change")
		// Narrowing a key, or ending it now, takes effect at once in the store that wrote it.
		now := base.Add(time.Minute)
		k.Scope, k.Endpoints, k.ExpiresAt = core.ScopeRead, nil, &now
		putKey(t, st, k)
		lookup(t, st, k, "after the change")
	})

	t.Run("UserRoundTrip", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		for _, want := range []core.User{
			sampleUser("alice"),
			{Name: "bob.smith_2-x", CreatedAt: base.Add(time.Second)},                     // no quota: the server's default applies
			{Name: "carol", Quota: &core.Quota{}, CreatedAt: base},                        // an explicit unlimited quota, not the default
			{Name: strings.Repeat("d", 64), Quota: &core.Quota{Hour: 5}, CreatedAt: base}, // the longest name
		} {
			putUser(t, st, want)
			getUser(t, st, want, "")
		}
	})

	t.Run("UserNotFound", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		putUser(t, st, sampleUser("alice"))
		for _, name := range []string{"bob", "alic", "alice2", "ALICE", "", "../keys/alice", "alice/"} {
			if _, err := st.GetUser(ctx, name); !errors.Is(err, core.ErrNotFound) {
				t.Errorf("GetUser(%q) err = %v; want core.ErrNotFound", name, err)
			}
		}
	})

	t.Run("UserOverwrite", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		u := sampleUser("alice")
		putUser(t, st, u)
		getUser(t, st, u, "before the change")
		u.Quota = &core.Quota{Minute: 1}
		putUser(t, st, u)
		getUser(t, st, u, "after the change")
		u.Quota = nil
		putUser(t, st, u)
		getUser(t, st, u, "after removing the quota")
	})

	t.Run("KeysAndUsersApart", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		// A user and a key may share a name; neither hides the other.
		ka, kb := sampleKey("alice", "alice"), sampleKey("kb", "bob")
		ua := sampleUser("alice")
		putKey(t, st, ka)
		putKey(t, st, kb)
		putUser(t, st, ua)
		lookup(t, st, ka, "")
		lookup(t, st, kb, "")
		getUser(t, st, ua, "")
		if _, err := st.GetUser(ctx, "bob"); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("GetUser(%q) (a key's user, never put) err = %v; want core.ErrNotFound", "bob", err)
		}
	})

	// listIDs returns the ids ListKeys(user) gives, in its order.
	listIDs := func(t *testing.T, st core.KeyStore, user string) []string {
		t.Helper()
		keys, err := st.ListKeys(ctx, user)
		if err != nil {
			t.Fatalf("ListKeys(%q) = %v; want nil", user, err)
		}
		ids := []string{}
		for _, k := range keys {
			if user != "" && k.User != user {
				t.Errorf("ListKeys(%q) holds %s of user %q", user, k.ID, k.User)
			}
			ids = append(ids, k.ID)
		}
		return ids
	}

	t.Run("KeyList", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		if got := listIDs(t, st, ""); len(got) != 0 {
			t.Fatalf("ListKeys(\"\") on an empty store = %v; want none", got)
		}
		// Put out of order: the list is oldest first, then by id for equal times.
		for _, k := range []struct {
			id, user string
			at       time.Duration
		}{{"k3", "alice", 3 * time.Second}, {"k1", "alice", time.Second}, {"k2", "bob", 2 * time.Second}, {"k0b", "alice", time.Second}, {"k0a", "alice", time.Second}} {
			key := sampleKey(k.id, k.user)
			key.CreatedAt = base.Add(k.at)
			putKey(t, st, key)
		}
		for user, want := range map[string][]string{
			"": {"k0a", "k0b", "k1", "k2", "k3"}, "alice": {"k0a", "k0b", "k1", "k3"}, "bob": {"k2"}, "carol": {},
		} {
			if got := listIDs(t, st, user); !reflect.DeepEqual(got, want) {
				t.Errorf("ListKeys(%q) = %v; want %v", user, got, want)
			}
		}
		keys, err := st.ListKeys(ctx, "bob")
		if want := sampleKey("k2", "bob"); err != nil || len(keys) != 1 || !sameKey(keys[0], func() core.Key { want.CreatedAt = base.Add(2 * time.Second); return want }()) {
			t.Errorf("ListKeys(%q) = %+v, %v; want the whole key k2", "bob", keys, err)
		}
	})

	t.Run("KeyDelete", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		ka, kb, kc := sampleKey("ka", "alice"), sampleKey("kb", "alice"), sampleKey("kc", "bob")
		for _, k := range []core.Key{ka, kb, kc} {
			putKey(t, st, k)
		}
		lookup(t, st, ka, "before the delete") // cached, where the store caches
		// Another user's key is not found, and stays.
		if _, err := st.DeleteKey(ctx, "bob", "ka"); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("DeleteKey(bob, ka) (alice's key) err = %v; want core.ErrNotFound", err)
		}
		lookup(t, st, ka, "after another user's refused delete")
		got, err := st.DeleteKey(ctx, "alice", "ka")
		if err != nil || !sameKey(got, ka) {
			t.Fatalf("DeleteKey(alice, ka) = %+v, %v; want %+v, nil", got, err, ka)
		}
		if _, err := st.LookupKey(ctx, ka.Hash); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("LookupKey(ka) after DeleteKey err = %v; want core.ErrNotFound (no stale cache hit)", err)
		}
		if _, err := st.DeleteKey(ctx, "alice", "ka"); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("second DeleteKey(alice, ka) err = %v; want core.ErrNotFound", err)
		}
		for _, id := range []string{"", "k", "KB", "kb ", "../kb", kb.Hash} {
			if _, err := st.DeleteKey(ctx, "", id); !errors.Is(err, core.ErrNotFound) {
				t.Errorf("DeleteKey(\"\", %q) err = %v; want core.ErrNotFound", id, err)
			}
		}
		// "" deletes anyone's key.
		if _, err := st.DeleteKey(ctx, "", "kc"); err != nil {
			t.Errorf("DeleteKey(\"\", kc) = %v; want nil", err)
		}
		if got := listIDs(t, st, ""); !reflect.DeepEqual(got, []string{"kb"}) {
			t.Errorf("ListKeys after the deletes = %v; want [kb]", got)
		}
		lookup(t, st, kb, "after the others' deletes")
	})

	t.Run("KeyDeleteTakesTheKeysMadeWithIt", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		// root made child, which made grand; root also made sibling. other is another root,
		// and bob's key names child as an ancestor (keys are made within one user, so this
		// never happens; a delete still takes only its own user's keys).
		key := func(id, user string, ancestors ...core.Key) core.Key {
			k := sampleKey(id, user)
			k.Ancestors = nil
			for _, a := range ancestors {
				k.Ancestors = append(k.Ancestors, a.Hash)
			}
			return k
		}
		root := key("root", "alice")
		child := key("child", "alice", root)
		grand := key("grand", "alice", child, root)
		sibling := key("sibling", "alice", root)
		other := key("other", "alice")
		bobs := key("bobs", "bob", child)
		for _, k := range []core.Key{root, child, grand, sibling, other, bobs} {
			putKey(t, st, k)
			lookup(t, st, k, "before the deletes") // cached, where the store caches
		}
		gone := func(when string, keys ...core.Key) {
			t.Helper()
			for _, k := range keys {
				if _, err := st.LookupKey(ctx, k.Hash); !errors.Is(err, core.ErrNotFound) {
					t.Errorf("LookupKey(%s) %s err = %v; want core.ErrNotFound (no stale cache hit)", k.ID, when, err)
				}
			}
		}
		got, err := st.DeleteKey(ctx, "alice", "child")
		if err != nil || !sameKey(got, child) {
			t.Fatalf("DeleteKey(alice, child) = %+v, %v; want %+v, nil", got, err, child)
		}
		gone("after deleting its parent", child, grand)
		for _, k := range []core.Key{root, sibling, other, bobs} {
			lookup(t, st, k, "after deleting child")
		}
		if got, want := listIDs(t, st, "alice"), []string{"other", "root", "sibling"}; !reflect.DeepEqual(got, want) {
			t.Errorf("ListKeys(alice) after deleting child = %v; want %v", got, want)
		}
		if got, err := st.DeleteKey(ctx, "", "root"); err != nil || !sameKey(got, root) {
			t.Fatalf("DeleteKey(\"\", root) = %+v, %v; want %+v, nil", got, err, root)
		}
		gone("after deleting root", root, sibling)
		lookup(t, st, other, "after deleting root")
		if got, want := listIDs(t, st, ""), []string{"bobs", "other"}; !reflect.DeepEqual(got, want) {
			t.Errorf("ListKeys after deleting root = %v; want %v", got, want)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		const writers, each = 8, 5
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				user := fmt.Sprintf("user%d", w)
				if err := st.PutUser(ctx, sampleUser(user)); err != nil {
					t.Errorf("PutUser(%q) = %v; want nil", user, err)
				}
				for i := range each {
					k := sampleKey(fmt.Sprintf("w%dk%d", w, i), user)
					if err := st.PutKey(ctx, k); err != nil {
						t.Errorf("PutKey(%q) = %v; want nil", k.ID, err)
						continue
					}
					if got, err := st.LookupKey(ctx, k.Hash); err != nil || !sameKey(got, k) {
						t.Errorf("LookupKey(%s) = %+v, %v; want %+v, nil", k.ID, got, err, k)
					}
				}
			})
		}
		wg.Wait()
		for w := range writers {
			getUser(t, st, sampleUser(fmt.Sprintf("user%d", w)), "after concurrent puts")
			for i := range each {
				lookup(t, st, sampleKey(fmt.Sprintf("w%dk%d", w, i), fmt.Sprintf("user%d", w)), "after concurrent puts")
			}
		}
	})

	t.Run("ContextDone", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		k, u := sampleKey("kept", "alice"), sampleUser("alice")
		putKey(t, st, k)
		putUser(t, st, u)
		lookup(t, st, k, "") // cached, where the store caches
		getUser(t, st, u, "")
		changedKey, changedUser := k, u
		changedKey.Scope, changedUser.Quota = core.ScopeRead, nil
		for _, dc := range doneContexts(t) {
			checkDone(t, dc, "PutKey(new)", st.PutKey(dc.ctx, sampleKey("new", "alice")))
			checkDone(t, dc, "PutKey(kept) changed", st.PutKey(dc.ctx, changedKey))
			checkDone(t, dc, "PutUser(new)", st.PutUser(dc.ctx, sampleUser("carol")))
			checkDone(t, dc, "PutUser(alice) changed", st.PutUser(dc.ctx, changedUser))
			_, err := st.LookupKey(dc.ctx, k.Hash)
			checkDone(t, dc, "LookupKey(kept)", err)
			_, err = st.GetUser(dc.ctx, "alice")
			checkDone(t, dc, `GetUser("alice")`, err)
			_, err = st.ListKeys(dc.ctx, "")
			checkDone(t, dc, `ListKeys("")`, err)
			_, err = st.DeleteKey(dc.ctx, "alice", "kept")
			checkDone(t, dc, "DeleteKey(kept)", err)
		}
		// Nothing the refused calls asked for happened.
		if _, err := st.LookupKey(ctx, sampleKey("new", "alice").Hash); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("LookupKey(new) after a refused put err = %v; want core.ErrNotFound", err)
		}
		if _, err := st.GetUser(ctx, "carol"); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("GetUser(%q) after a refused put err = %v; want core.ErrNotFound", "carol", err)
		}
		lookup(t, st, k, "after refused changes")
		getUser(t, st, u, "after refused changes")
	})

	t.Run("Durable", func(t *testing.T) {
		t.Parallel()
		st, reopen := open(t)
		reopen = durable(t, reopen)
		k, u := sampleKey("k1", "alice"), sampleUser("alice")
		putKey(t, st, k)
		putUser(t, st, u)
		k.Scope = core.ScopeAll
		putKey(t, st, k)
		gone := sampleKey("gone", "alice")
		putKey(t, st, gone)
		if _, err := st.DeleteKey(ctx, "alice", "gone"); err != nil {
			t.Fatalf("DeleteKey(gone) = %v; want nil", err)
		}
		st = reopen()
		lookup(t, st, k, "after a restart")
		getUser(t, st, u, "after a restart")
		if _, err := st.LookupKey(ctx, gone.Hash); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("LookupKey(gone) after a delete and a restart err = %v; want core.ErrNotFound", err)
		}
		if got := listIDs(t, st, "alice"); !reflect.DeepEqual(got, []string{"k1"}) {
			t.Errorf("ListKeys(alice) after a restart = %v; want [k1]", got)
		}
	})
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

// sameUser reports whether two users are equal, comparing times with Equal.
func sameUser(got, want core.User) bool {
	if !got.CreatedAt.Equal(want.CreatedAt) {
		return false
	}
	got.CreatedAt = want.CreatedAt
	return reflect.DeepEqual(got, want)
}
