package pebble_test

import (
	"path/filepath"
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/filedir"
	"github.com/gantryhq/gantry/store/keydir"
	"github.com/gantryhq/gantry/store/memq"
	"github.com/gantryhq/gantry/store/pebble"
	"github.com/gantryhq/gantry/store/storetest"
)

// open opens a store in dir and closes it when the test ends.
func open(t *testing.T, dir string) *pebble.Store {
	t.Helper()
	s, err := pebble.Open(dir)
	if err != nil {
		t.Fatalf("Open(%q) = %v; want nil", dir, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close() = %v; want nil", err)
		}
	})
	return s
}

// opener runs a suite on a Pebble store seen as S: a fresh directory for each store, opened
// again on reopen.
func opener[S any](as func(*pebble.Store) S) storetest.Opener[S] {
	return func(t *testing.T) (S, func() S) {
		dir := t.TempDir()
		s := open(t, dir)
		return as(s), func() S {
			if err := s.Close(); err != nil {
				t.Fatalf("Close() = %v; want nil", err)
			}
			s = open(t, dir)
			return as(s)
		}
	}
}

// TestStores runs every port's suite on the embedded backend, as server.OpenStores opens it:
// Pebble, with the keys in store/keydir and the files in store/filedir beside it, and the rate
// limits in core's memory (one replica counts alone).
func TestStores(t *testing.T) {
	t.Parallel()
	storetest.RunAll(t, storetest.Backend{
		Endpoints:    opener(func(s *pebble.Store) core.EndpointStore { return s }),
		Templates:    opener(func(s *pebble.Store) core.TemplateStore { return s }),
		Volumes:      opener(func(s *pebble.Store) core.VolumeStore { return s }),
		Usage:        opener(func(s *pebble.Store) core.UsageStore { return s }),
		History:      opener(func(s *pebble.Store) core.HistoryStore { return s }),
		WorkerTokens: opener(func(s *pebble.Store) core.WorkerTokenStore { return s }),
		Jobs: func(t *testing.T) (core.JobStore, func() core.JobStore) {
			js, err := open(t, t.TempDir()).Jobs(memq.Options{})
			if err != nil {
				t.Fatalf("Jobs() = %v; want nil", err)
			}
			return js, nil
		},
		Keys: func(t *testing.T) (core.KeyStore, func() core.KeyStore) {
			root := t.TempDir()
			d := openKeyDir(t, root)
			return d, func() core.KeyStore {
				d.Close()
				d = openKeyDir(t, root)
				return d
			}
		},
		Files: func(t *testing.T) (core.FileStore, func() core.FileStore) {
			path := filepath.Join(t.TempDir(), "files")
			return openFileDir(t, path), func() core.FileStore { return openFileDir(t, path) }
		},
		RateLimits: func(*testing.T) (core.RateLimits, func() core.RateLimits) { return &core.RateLimiter{}, nil },
		Lacks: map[string]string{
			"Leases": "the embedded store serves one replica, which always leads (server.Stores.Leases is nil)",
		},
	})
}

// openKeyDir opens the key directory of root and closes it when the test ends.
func openKeyDir(t *testing.T, root string) *keydir.Dir {
	t.Helper()
	d, err := keydir.Open(root)
	if err != nil {
		t.Fatalf("keydir.Open(%q) = %v; want nil", root, err)
	}
	t.Cleanup(d.Close)
	return d
}

// openFileDir opens the file directory at path.
func openFileDir(t *testing.T, path string) *filedir.Dir {
	t.Helper()
	d, err := filedir.Open(path)
	if err != nil {
		t.Fatalf("filedir.Open(%q) = %v; want nil", path, err)
	}
	return d
}
