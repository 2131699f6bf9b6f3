package worker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the worker's goroutines and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLogsJobs checks that a worker logs, at the default level (what a built-in worker's log
// file gets), that it started, and each job taken, done and failed.
func TestLogsJobs(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg, _ := f.config()
	var logs syncBuffer
	cfg.Log = slog.New(slog.NewTextHandler(&logs, nil))
	start(t, cfg, func(_ context.Context, job *Job, _ Responder) (any, error) {
		if job.ID == "j2" {
			return nil, errors.New("boom")
		}
		return "ok", nil
	})
	f.jobs <- `{"id":"j1","input":{}}`
	f.jobs <- `{"id":"j2","input":{}}`
	f.waitFor(kindDone, "both results", func(reqs []request) bool { return hasDone("j1")(reqs) && hasDone("j2")(reqs) })

	want := []string{
		`level=INFO msg="worker started; polling for jobs" worker=w1 concurrency=1`,
		`level=INFO msg="job taken" worker=w1 job=j1`,
		`level=INFO msg="job done" worker=w1 job=j1 took=`,
		`level=INFO msg="job taken" worker=w1 job=j2`,
		`level=INFO msg="job failed" worker=w1 job=j2 err=boom took=`,
	}
	var missing []string
	for deadline := time.Now().Add(waitTimeout); ; {
		missing = missing[:0]
		got := logs.String()
		for _, w := range want {
			if !strings.Contains(got, w) {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		<-time.After(5 * time.Millisecond) // the done/failed lines follow the post; poll, bounded by the deadline
	}
	if len(missing) > 0 {
		t.Errorf("the worker's log lacks %q; it is:\n%s", missing, logs.String())
	}
}
