package memory_test

import (
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/memory"
	"github.com/gantryhq/gantry/store/storetest"
)

// opener runs a suite on a fresh in-memory store seen as S. There is no reopen: the store
// keeps nothing across a restart, and the suites skip their durability tests.
func opener[S any](as func(*memory.Store) S) storetest.Opener[S] {
	return func(*testing.T) (S, func() S) { return as(memory.New()), nil }
}

func TestEndpointStore(t *testing.T) {
	t.Parallel()
	storetest.RunEndpointStore(t, opener(func(s *memory.Store) core.EndpointStore { return s }))
}

func TestTemplateStore(t *testing.T) {
	t.Parallel()
	storetest.RunTemplateStore(t, opener(func(s *memory.Store) core.TemplateStore { return s }))
}

func TestKeyStore(t *testing.T) {
	t.Parallel()
	storetest.RunKeyStore(t, opener(func(s *memory.Store) core.KeyStore { return s }))
}

func TestUsageStore(t *testing.T) {
	t.Parallel()
	storetest.RunUsageStore(t, opener(func(s *memory.Store) core.UsageStore { return s }))
}

func TestFileStore(t *testing.T) {
	t.Parallel()
	storetest.RunFileStore(t, opener(func(s *memory.Store) core.FileStore { return s }))
}

func TestWorkerTokenStore(t *testing.T) {
	t.Parallel()
	storetest.RunWorkerTokenStore(t, opener(func(s *memory.Store) core.WorkerTokenStore { return s }))
}

func TestHistoryStore(t *testing.T) {
	t.Parallel()
	storetest.RunHistoryStore(t, func(t *testing.T) (core.HistoryStore, func() core.HistoryStore) {
		s := memory.New() // its reopen is the same store: memory does not survive a restart
		return s, func() core.HistoryStore { return s }
	})
}
