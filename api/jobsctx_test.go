package api_test

// This file tests that a request's context reaches the job store through the engine.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

type baseKey struct{}

// seenStore is a JobStore that records, by method, whether each call's context carried the
// server's base context's value (every request's context derives from it).
type seenStore struct {
	core.JobStore
	mu   sync.Mutex
	seen map[string][]bool
}

func (s *seenStore) note(ctx context.Context, method string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[method] = append(s.seen[method], ctx.Value(baseKey{}) != nil)
}

func (s *seenStore) calls(method string) []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bool(nil), s.seen[method]...)
}

func (s *seenStore) Insert(ctx context.Context, rec core.Job, input []byte, durable bool) (core.Job, error) {
	s.note(ctx, "Insert")
	return s.JobStore.Insert(ctx, rec, input, durable)
}

func (s *seenStore) Update(ctx context.Context, id string, from core.StatusSet, change func(*core.Job) error, durable bool) (core.Job, error) {
	s.note(ctx, "Update")
	return s.JobStore.Update(ctx, id, from, change, durable)
}

func (s *seenStore) Get(ctx context.Context, id string) (core.Job, error) {
	s.note(ctx, "Get")
	return s.JobStore.Get(ctx, id)
}

// TestRequestContextReachesStore: the context of a run, status and cancel request is the one
// the job store receives (CancelJob's reaches Jobs.Cancel), so that a request that is
// abandoned, or a server that stops, cancels the store's work.
func TestRequestContextReachesStore(t *testing.T) {
	t.Parallel()
	st := &seenStore{seen: map[string][]bool{}}
	e := setup(t, setupOpts{quota: core.Quota{Minute: 1000}, base: context.WithValue(context.Background(), baseKey{}, true),
		jobStore: func(js core.JobStore) core.JobStore { st.JobStore = js; return st }})
	ep := e.create(minimalQueue)
	id := e.run(ep, `{}`)
	_ = e.jobStatus(ep, id)
	if r := e.as(e.alice, "POST", "/v2/"+ep+"/cancel/"+id, ""); r.status != 200 {
		t.Fatalf("cancel = %d %s", r.status, r.body)
	}
	deadline := time.Now().Add(time.Second)
	for _, m := range []string{"Insert", "Get", "Update"} {
		got := st.calls(m)
		for len(got) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			got = st.calls(m)
		}
		if len(got) == 0 {
			t.Errorf("the store's %s was not called", m)
		}
		for i, ok := range got {
			if !ok {
				t.Errorf("the store's %s call %d did not receive the request's context", m, i)
			}
		}
	}
}
