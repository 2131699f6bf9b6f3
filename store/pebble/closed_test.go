package pebble_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/pebble"
)

// TestClosedStoreAnswersErrClosed: every operation after Close returns ErrClosed instead of
// panicking as Pebble does, and Close waits for the writes in flight, however they interleave
// (a worker's exit reported while the server shuts down wrote to a closed store and crashed it).
func TestClosedStoreAnswersErrClosed(t *testing.T) {
	t.Parallel()
	for round := range 20 {
		st, err := pebble.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var written atomic.Int64
		start := make(chan struct{})
		for g := range 4 {
			wg.Go(func() {
				<-start
				for i := 0; ; i++ {
					j := &core.Job{ID: fmt.Sprintf("j%d-%d", g, i), Endpoint: "ep", Status: core.InQueue}
					err := st.PutJob(j, []byte(`{}`), i%8 == 0)
					if err == nil {
						err = st.SyncJobs()
					}
					written.Add(1)
					if err != nil {
						if !errors.Is(err, pebble.ErrClosed) {
							t.Errorf("round %d: PutJob racing Close = %v; want nil or ErrClosed", round, err)
						}
						return
					}
				}
			})
		}
		close(start)
		for deadline := time.Now().Add(10 * time.Second); written.Load() < int64(round*5); { // close at a different point each round
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the writers made %d writes in 10 s", round, written.Load())
			}
			runtime.Gosched()
		}
		if err := st.Close(); err != nil {
			t.Fatalf("Close() = %v; want nil", err)
		}
		wg.Wait()
	}

	st, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Errorf("second Close() = %v; want nil", err)
	}
	for name, op := range map[string]func() error{
		"PutJob":         func() error { return st.PutJob(&core.Job{ID: "j"}, []byte(`{}`), true) },
		"PutJob(record)": func() error { return st.PutJob(&core.Job{ID: "j"}, nil, false) },
		"SyncJobs":       st.SyncJobs,
		"GetJob":         func() error { _, err := st.GetJob("j"); return err },
		"Input":          func() error { _, err := st.Input("j"); return err },
		"DeleteJob":      func() error { return st.DeleteJob("j") },
		"ScanJobs":       func() error { return st.ScanJobs(func(*core.Job) {}) },
		"PutEndpoint":    func() error { return st.PutEndpoint(ctx, core.Endpoint{ID: "e"}) },
		"GetEndpoint":    func() error { _, err := st.GetEndpoint(ctx, "e"); return err },
		"ListEndpoints":  func() error { _, _, err := st.ListEndpoints(ctx, "o", "", 10); return err },
		"DeleteEndpoint": func() error { return st.DeleteEndpoint(ctx, "e") },
		"ScanEndpoints":  func() error { return st.ScanEndpoints(ctx, func(core.Endpoint) error { return nil }) },
		"AddUsage":       func() error { _, _, err := st.AddUsage(ctx, core.Usage{JobID: "j", Owner: "o"}); return err },
		"ScanUsage": func() error {
			return st.ScanUsage(ctx, "o", time.Time{}, time.Time{}, func(core.Usage) bool { return true })
		},
	} {
		if err := op(); !errors.Is(err, pebble.ErrClosed) {
			t.Errorf("%s after Close = %v; want ErrClosed", name, err)
		}
	}
}
