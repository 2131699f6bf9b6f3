package core_test

// This file tests that a caller's context reaches the job store: its values (the request's
// trace) and its end, which stops a store call, but for the writes that must outlive their
// request (a worker's result, a cancel once received).

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

type ctxKey struct{}

// ctxStore is a JobStore that records the ctxKey value each call receives, and that answers as
// a shared store would to a context that has ended: with its error, before doing anything. With
// blockGet, Get waits for its context to end.
type ctxStore struct {
	core.JobStore
	blockGet bool
	blocked  chan struct{} // with blockGet: receives once Get waits

	mu   sync.Mutex
	seen map[string][]any // method -> the ctxKey values it received
}

func (s *ctxStore) saw(ctx context.Context, method string) error {
	s.mu.Lock()
	s.seen[method] = append(s.seen[method], ctx.Value(ctxKey{}))
	s.mu.Unlock()
	return ctx.Err()
}

func (s *ctxStore) values(method string) []any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]any(nil), s.seen[method]...)
}

func (s *ctxStore) Insert(ctx context.Context, rec core.Job, input []byte, durable bool) (core.Job, error) {
	if err := s.saw(ctx, "Insert"); err != nil {
		return core.Job{}, err
	}
	return s.JobStore.Insert(ctx, rec, input, durable)
}

func (s *ctxStore) Get(ctx context.Context, id string) (core.Job, error) {
	if s.blockGet {
		s.blocked <- struct{}{}
		<-ctx.Done()
	}
	if err := s.saw(ctx, "Get"); err != nil {
		return core.Job{}, err
	}
	return s.JobStore.Get(ctx, id)
}

func (s *ctxStore) Update(ctx context.Context, id string, from core.StatusSet, change func(*core.Job) error, durable bool) (core.Job, error) {
	if err := s.saw(ctx, "Update"); err != nil {
		return core.Job{}, err
	}
	return s.JobStore.Update(ctx, id, from, change, durable)
}

func (s *ctxStore) Expire(ctx context.Context, now time.Time) ([]core.ExpiredJob, error) {
	if err := s.saw(ctx, "Expire"); err != nil {
		return nil, err
	}
	return s.JobStore.Expire(ctx, now)
}

// ctxRig returns a rig whose engine runs over a ctxStore.
func ctxRig(t *testing.T) (*rig, *ctxStore) {
	t.Helper()
	r := newRig(t)
	cs := &ctxStore{JobStore: r.js, seen: map[string][]any{}}
	r.jobs = core.NewJobs(core.JobsConfig{Store: cs, Clock: r.clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return r, cs
}

// TestContextReachesStore: the context a caller passes to Submit, Get, Cancel, Done and Tick
// is the one the store receives (its values, such as the request's trace, go with it).
func TestContextReachesStore(t *testing.T) {
	t.Parallel()
	r, cs := ctxRig(t)
	ctx := context.WithValue(t.Context(), ctxKey{}, "request")
	j, err := r.jobs.Submit(ctx, r.ep, core.Submission{Input: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	ref := core.JobRef{Endpoint: r.ep.ID, ID: j.ID}
	if _, err := r.jobs.Get(ctx, ref, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.jobs.Get(ctx, ref, time.Hour); err != nil { // a ttl change: an Update
		t.Fatal(err)
	}
	if _, err := r.jobs.Cancel(ctx, ref); err != nil {
		t.Fatal(err)
	}
	r.jobs.Tick(context.WithValue(t.Context(), ctxKey{}, "tick"), r.clock.Now())

	second := r.submit(`{}`)
	r.take("w")
	if err := r.jobs.Done(context.WithValue(t.Context(), ctxKey{}, "post"), r.ep.ID, "w", second.ID, core.Result{Output: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}

	for method, want := range map[string][]any{
		"Insert": {"request", nil},               // Submit, then the rig's own submit
		"Get":    {"request"},                    // Get
		"Update": {"request", "request", "post"}, // Get with a ttl, Cancel, Done
		"Expire": {"tick"},
	} {
		got := cs.values(method)
		if len(got) != len(want) {
			t.Errorf("%s received the values %v; want %v", method, got, want)
			continue
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s received the values %v; want %v", method, got, want)
				break
			}
		}
	}
}

// TestContextEndStopsStoreCall: a caller that leaves (its context cancelled) stops the store
// call it is waiting on, as a PostgreSQL query is cancelled, instead of waiting on it.
func TestContextEndStopsStoreCall(t *testing.T) {
	t.Parallel()
	r, cs := ctxRig(t)
	j := r.submit(`{}`)
	cs.blockGet, cs.blocked = true, make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := r.jobs.Get(ctx, core.JobRef{Endpoint: r.ep.ID, ID: j.ID}, 0)
		done <- err
	}()
	<-cs.blocked // Get waits in the store
	cancel()
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, context.Canceled) {
			t.Errorf("Get with its context cancelled = %v; want an error wrapping context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Get did not return once its context was cancelled: the store never saw it")
	}
}

// TestResultOutlivesRequest: a worker's result and a cancel are stored even when the request
// that carried them has ended: the store receives a context that is not cancelled, with the
// request's values. A read for a caller that left is not done.
func TestResultOutlivesRequest(t *testing.T) {
	t.Parallel()
	r, cs := ctxRig(t)
	gone, cancel := context.WithCancel(context.WithValue(t.Context(), ctxKey{}, "gone"))
	cancel()

	j := r.submit(`{}`)
	r.take("w")
	if err := r.jobs.Done(gone, r.ep.ID, "w", j.ID, core.Result{Output: json.RawMessage(`1`)}); err != nil {
		t.Fatalf("Done with its request's context ended = %v; want the result stored", err)
	}
	if got := r.status(j.ID); got != core.Completed {
		t.Errorf("job after Done = %s; want COMPLETED", got)
	}

	k := r.submit(`{}`)
	if _, err := r.jobs.Cancel(gone, core.JobRef{Endpoint: r.ep.ID, ID: k.ID}); err != nil {
		t.Fatalf("Cancel with its request's context ended = %v; want the job cancelled", err)
	}
	if got := r.status(k.ID); got != core.Cancelled {
		t.Errorf("job after Cancel = %s; want CANCELLED", got)
	}
	if vals := cs.values("Update"); len(vals) != 2 || vals[0] != "gone" || vals[1] != "gone" {
		t.Errorf("Update received the values %v; want the requests' values twice", vals)
	}

	if _, err := r.jobs.Get(gone, core.JobRef{Endpoint: r.ep.ID, ID: k.ID}, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Get for a caller that left = %v; want an error wrapping context.Canceled", err)
	}
}
