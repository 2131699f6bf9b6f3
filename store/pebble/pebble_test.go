package pebble_test

import (
	"testing"

	"github.com/gantryhq/gantry/core"
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

func TestEndpointStore(t *testing.T) {
	t.Parallel()
	storetest.RunEndpointStore(t, opener(func(s *pebble.Store) core.EndpointStore { return s }))
}

func TestTemplateStore(t *testing.T) {
	t.Parallel()
	storetest.RunTemplateStore(t, opener(func(s *pebble.Store) core.TemplateStore { return s }))
}

func TestUsageStore(t *testing.T) {
	t.Parallel()
	storetest.RunUsageStore(t, opener(func(s *pebble.Store) core.UsageStore { return s }))
}

func TestJobStoreContract(t *testing.T) {
	t.Parallel()
	storetest.RunJobStore(t, func(t *testing.T) core.JobStore {
		js, err := open(t, t.TempDir()).Jobs(memq.Options{})
		if err != nil {
			t.Fatalf("Jobs() = %v; want nil", err)
		}
		return js
	})
}

func TestHistoryStore(t *testing.T) {
	t.Parallel()
	storetest.RunHistoryStore(t, opener(func(s *pebble.Store) core.HistoryStore { return s }))
}
