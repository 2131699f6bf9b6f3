package memory_test

import (
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/memory"
	"github.com/gantryhq/gantry/store/memq"
	"github.com/gantryhq/gantry/store/storetest"
)

// opener runs a suite on a fresh in-memory store seen as S. There is no reopen: the store
// keeps nothing across a restart, and the suites skip their durability tests.
func opener[S any](as func(*memory.Store) S) storetest.Opener[S] {
	return func(*testing.T) (S, func() S) { return as(memory.New()), nil }
}

// TestStores runs every port's suite on the in-memory backend: store/memory, and memq for jobs
// (over records in memory, as no durable store keeps them).
func TestStores(t *testing.T) {
	t.Parallel()
	storetest.RunAll(t, storetest.Backend{
		Endpoints:    opener(func(s *memory.Store) core.EndpointStore { return s }),
		Templates:    opener(func(s *memory.Store) core.TemplateStore { return s }),
		Volumes:      opener(func(s *memory.Store) core.VolumeStore { return s }),
		Keys:         opener(func(s *memory.Store) core.KeyStore { return s }),
		Usage:        opener(func(s *memory.Store) core.UsageStore { return s }),
		Files:        opener(func(s *memory.Store) core.FileStore { return s }),
		WorkerTokens: opener(func(s *memory.Store) core.WorkerTokenStore { return s }),
		History: func(t *testing.T) (core.HistoryStore, func() core.HistoryStore) {
			s := memory.New() // its reopen is the same store: memory does not survive a restart
			return s, func() core.HistoryStore { return s }
		},
		Jobs: func(t *testing.T) (core.JobStore, func() core.JobStore) {
			s, err := memq.Open(memq.NewRecords(), memq.Options{})
			if err != nil {
				t.Fatalf("memq.Open = %v; want nil", err)
			}
			return s, nil
		},
		Lacks: map[string]string{
			"RateLimits": "core.RateLimiter keeps the windows in memory; core's TestRateLimiter runs the suite",
			"Leases":     "core.MemoryLeases are the leases in memory; core's TestMemoryLeases runs the suite",
		},
	})
}
