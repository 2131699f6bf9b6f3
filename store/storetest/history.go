package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// RunHistoryStore runs the conformance suite of core.HistoryStore, the endpoints' per-minute
// history. Records' At are whole minutes.
func RunHistoryStore(t *testing.T, open Opener[core.HistoryStore]) {
	t.Helper()
	ctx := context.Background()
	m0 := base.Truncate(time.Minute).UTC()
	minute := func(i int) time.Time { return m0.Add(time.Duration(i) * time.Minute) }
	counts := func(completed, failed int64, delayMs, execMs int64) core.HistoryCounts {
		var c core.HistoryCounts
		c.Completed, c.Failed = completed, failed
		n := completed + failed
		c.DelaySumMs, c.ExecSumMs = n*delayMs, n*execMs
		c.Delay[3], c.Exec[7] = n, n
		return c
	}
	scan := func(t *testing.T, st core.HistoryStore, ep string, from, to time.Time) []core.HistoryRecord {
		t.Helper()
		recs, err := st.ScanHistory(ctx, ep, from, to)
		if err != nil {
			t.Fatalf("ScanHistory(%s, %v, %v) = %v; want nil", ep, from, to, err)
		}
		return recs
	}
	add := func(t *testing.T, st core.HistoryStore, recs ...core.HistoryRecord) {
		t.Helper()
		if err := st.AddHistory(ctx, recs); err != nil {
			t.Fatalf("AddHistory = %v; want nil", err)
		}
	}

	t.Run("AddsUpAndSurvivesReopen", func(t *testing.T) {
		t.Parallel()
		st, reopen := open(t)
		add(t, st, core.HistoryRecord{Endpoint: "ep-a", At: minute(0), Counts: counts(2, 1, 30, 700)},
			core.HistoryRecord{Endpoint: "ep-b", At: minute(0), Counts: counts(5, 0, 1, 1)})
		add(t, st, core.HistoryRecord{Endpoint: "ep-a", At: minute(0), Counts: counts(1, 0, 30, 700)},
			core.HistoryRecord{Endpoint: "ep-a", At: minute(2), Counts: counts(0, 4, 10, 10)})
		want := counts(3, 1, 30, 700)
		for i := range 2 {
			if i == 1 { // a restart keeps every minute
				if reopen == nil {
					break
				}
				st = reopen()
			}
			recs := scan(t, st, "ep-a", minute(0), minute(3))
			if len(recs) != 2 || !recs[0].At.Equal(minute(0)) || !recs[1].At.Equal(minute(2)) {
				t.Fatalf("ScanHistory(ep-a) = %+v; want minutes 0 and 2", recs)
			}
			if recs[0].Counts != want || recs[0].Endpoint != "ep-a" {
				t.Errorf("minute 0 = %+v; want %+v", recs[0].Counts, want)
			}
			if got := recs[1].Counts.Failed; got != 4 {
				t.Errorf("minute 2 Failed = %d; want 4", got)
			}
			if recs := scan(t, st, "ep-b", minute(0), minute(3)); len(recs) != 1 || recs[0].Counts.Completed != 5 {
				t.Errorf("ScanHistory(ep-b) = %+v; want 5 completed at minute 0", recs)
			}
		}
	})

	t.Run("RangeIsHalfOpen", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		for i := range 5 {
			add(t, st, core.HistoryRecord{Endpoint: "ep-a", At: minute(i), Counts: counts(int64(i+1), 0, 1, 1)})
		}
		add(t, st, core.HistoryRecord{Endpoint: "ep-ab", At: minute(2), Counts: counts(9, 0, 1, 1)}) // a longer id sharing a prefix
		recs := scan(t, st, "ep-a", minute(1), minute(3))
		if len(recs) != 2 || recs[0].Counts.Completed != 2 || recs[1].Counts.Completed != 3 {
			t.Errorf("ScanHistory([1, 3)) = %+v; want minutes 1 and 2", recs)
		}
		if recs := scan(t, st, "ep-a", minute(1).Add(time.Second), minute(2).Add(time.Second)); len(recs) != 1 || !recs[0].At.Equal(minute(2)) {
			t.Errorf("ScanHistory([1:01, 2:01)) = %+v; want minute 2 alone", recs)
		}
		if recs := scan(t, st, "ep-none", minute(0), minute(5)); len(recs) != 0 {
			t.Errorf("ScanHistory(unknown endpoint) = %+v; want none", recs)
		}
	})

	t.Run("Trim", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		for i := range 4 {
			add(t, st, core.HistoryRecord{Endpoint: "ep-a", At: minute(i), Counts: counts(1, 0, 1, 1)},
				core.HistoryRecord{Endpoint: "ep-b", At: minute(i), Counts: counts(1, 0, 1, 1)})
		}
		if err := st.TrimHistory(ctx, minute(2)); err != nil {
			t.Fatalf("TrimHistory = %v; want nil", err)
		}
		for _, ep := range []string{"ep-a", "ep-b"} {
			if recs := scan(t, st, ep, minute(0), minute(4)); len(recs) != 2 || !recs[0].At.Equal(minute(2)) {
				t.Errorf("after TrimHistory(minute 2), ScanHistory(%s) = %+v; want minutes 2 and 3", ep, recs)
			}
		}
	})

	t.Run("DoneContext", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		for _, dc := range doneContexts(t) {
			err := st.AddHistory(dc.ctx, []core.HistoryRecord{{Endpoint: "ep-a", At: minute(0), Counts: counts(1, 0, 1, 1)}})
			checkDone(t, dc, "AddHistory", err)
			_, err = st.ScanHistory(dc.ctx, "ep-a", minute(0), minute(1))
			checkDone(t, dc, "ScanHistory", err)
		}
		if recs := scan(t, st, "ep-a", minute(0), minute(1)); len(recs) != 0 {
			t.Errorf("after adds with done contexts, ScanHistory = %+v; want none", recs)
		}
	})
}
