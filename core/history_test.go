package core_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/store/memory"
	"github.com/gantryhq/gantry/store/memq"
	"github.com/gantryhq/gantry/store/pebble"
)

func TestHistoryQuantile(t *testing.T) {
	t.Parallel()
	var bins [core.HistoryBins]int64
	if got := core.HistoryQuantile(&bins, 0.5); got != 0 {
		t.Errorf("quantile of nothing = %v; want 0", got)
	}
	bins[7] = 10 // ten jobs of 500 ms to 1 s
	for q, want := range map[float64]float64{0.5: 750, 0.9: 950, 0.1: 550} {
		if got := core.HistoryQuantile(&bins, q); got != want {
			t.Errorf("HistoryQuantile(10 in (500, 1000], %v) = %v; want %v", q, got, want)
		}
	}
	bins[core.HistoryBins-1] = 90 // and 90 above the last bound
	if got := core.HistoryQuantile(&bins, 0.99); got != float64(core.HistoryBounds[len(core.HistoryBounds)-1]) {
		t.Errorf("p99 in the open last bin = %v; want the last bound", got)
	}
}

// failingHistory refuses adds while fail is set.
type failingHistory struct {
	*memory.Store
	fail bool
}

func (f *failingHistory) AddHistory(ctx context.Context, recs []core.HistoryRecord) error {
	if f.fail {
		return errors.New("the store is down")
	}
	return f.Store.AddHistory(ctx, recs)
}

// TestHistoryFlushKeepsCountsOnError: counts a flush could not store are stored by the next.
func TestHistoryFlushKeepsCountsOnError(t *testing.T) {
	t.Parallel()
	st := &failingHistory{Store: memory.New(), fail: true}
	clk := testkit.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	db, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	js, err := db.Jobs(memq.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	jobs := core.NewJobs(core.JobsConfig{Store: js, Clock: clk, History: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ep := &core.Endpoint{ID: "ep1", Owner: "alice", TimeoutMs: 60000}
	endOne := func() {
		t.Helper()
		j, err := jobs.Submit(t.Context(), ep, core.Submission{Input: []byte(`{}`)})
		if err != nil {
			t.Fatalf("Submit = %v", err)
		}
		if _, err := jobs.Cancel(t.Context(), core.JobRef{Endpoint: ep.ID, ID: j.ID}); err != nil {
			t.Fatalf("Cancel = %v", err)
		}
	}
	endOne()
	if err := jobs.FlushHistory(context.Background()); err == nil {
		t.Fatal("FlushHistory with the store down = nil; want an error")
	}
	endOne()
	st.fail = false
	if err := jobs.FlushHistory(context.Background()); err != nil {
		t.Fatalf("FlushHistory = %v; want nil", err)
	}
	now := clk.Now()
	recs, err := st.ScanHistory(context.Background(), ep.ID, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil || len(recs) != 1 || recs[0].Counts.Cancelled != 2 {
		t.Fatalf("stored history = %+v, %v; want one minute with 2 cancelled", recs, err)
	}
}

// BenchmarkJobEnd is a job's submit, take and end (COMPLETED) on memq over Pebble, without and
// with the history recorder: the history must not slow the end path measurably (the
// recorder's cost is a map update under a lock; the store is written once a second, by
// RunHistory, which this does not run).
func BenchmarkJobEnd(b *testing.B) {
	for _, name := range []string{"none", "history"} {
		b.Run(name, func(b *testing.B) {
			clk := testkit.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			db, err := pebble.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			js, err := db.Jobs(memq.Options{Clock: clk})
			if err != nil {
				b.Fatal(err)
			}
			cfg := core.JobsConfig{Store: js, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if name == "history" {
				cfg.History = memory.New()
			}
			jobs := core.NewJobs(cfg)
			ep := &core.Endpoint{ID: "ep1", Owner: "alice", TimeoutMs: 60000}
			jobs.RegisterWorker(ep.ID, "w1")
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				j, err := jobs.Submit(b.Context(), ep, core.Submission{Input: []byte(`{}`), Sync: true})
				if err != nil {
					b.Fatal(err)
				}
				if got := jobs.Take(ctx, ep.ID, "w1", 1); len(got) != 1 {
					b.Fatalf("Take = %d jobs; want 1", len(got))
				}
				if err := jobs.Done(b.Context(), ep.ID, "w1", j.ID, core.Result{Output: []byte(`1`)}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
