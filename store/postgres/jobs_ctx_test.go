package postgres_test

// This file tests that the job engine's PostgreSQL queries run under its caller's context.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/internal/testkit"
)

// TestEngineContextCancelsQuery: a caller that leaves cancels the engine's query instead of
// waiting on it. With the job table locked by another transaction, Jobs.Get returns once its
// context ends, with the context's error.
func TestEngineContextCancelsQuery(t *testing.T) {
	s := openJobs(t, pgtest.URL(t))
	jobs := core.NewJobs(core.JobsConfig{Store: s, Clock: testkit.NewClock(time.Now())})
	ep := &core.Endpoint{ID: "ep", Owner: "alice"}
	j, err := jobs.Submit(t.Context(), ep, core.Submission{Input: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := s.DB().Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), `LOCK TABLE gantry_jobs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := jobs.Get(ctx, core.JobRef{Endpoint: ep.ID, ID: j.ID}, 0)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Get on a locked table past its context's deadline = %v; want an error wrapping context.DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		_ = tx.Rollback(context.Background()) // let the query go
		t.Fatal("Get still waited on the locked table 10 s after its context's deadline")
	}
}
