package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// RunUsageStore runs the conformance suite of core.UsageStore, the usage ledger. Job ids are of
// the form core.ParseJobKey accepts or any [a-z0-9-] string; owners are valid user names or
// core.PlatformOwner-like names.
func RunUsageStore(t *testing.T, open Opener[core.UsageStore]) {
	t.Helper()
	ctx := context.Background()
	sample := func(job, owner string, at time.Time) core.Usage {
		return core.Usage{
			Charge: core.Charge{Model: "gantry-image", Unit: "megapixel", Measure: "pixels", Quantity: 262144,
				UnitsMicros: 262144, PriceMicros: 2400, CostMicros: core.CostMicros(262144, 2400)},
			JobID: job, Owner: owner, At: at,
		}
	}
	same := func(a, b core.Usage) bool {
		return a.Charge == b.Charge && a.JobID == b.JobID && a.Owner == b.Owner && a.At.Equal(b.At)
	}
	scanAll := func(t *testing.T, st core.UsageStore, owner string, from, to time.Time) []core.Usage {
		t.Helper()
		var recs []core.Usage
		if err := st.ScanUsage(ctx, owner, from, to, func(u core.Usage) bool { recs = append(recs, u); return true }); err != nil {
			t.Fatalf("ScanUsage(%q, %v, %v) = %v; want nil", owner, from, to, err)
		}
		return recs
	}
	scan := func(t *testing.T, st core.UsageStore, owner string, from, to time.Time) []string {
		t.Helper()
		var ids []string
		for _, u := range scanAll(t, st, owner, from, to) {
			ids = append(ids, u.JobID)
		}
		return ids
	}
	add := func(t *testing.T, st core.UsageStore, u core.Usage) {
		t.Helper()
		if _, added, err := st.AddUsage(ctx, u); err != nil || !added {
			t.Fatalf("AddUsage(%s) = %v, %v; want added, nil", u.JobID, added, err)
		}
	}

	t.Run("OncePerJob", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		first := sample("job-1", "alice", base)
		kept, added, err := st.AddUsage(ctx, first)
		if err != nil || !added || !same(kept, first) {
			t.Fatalf("AddUsage(first) = %+v, %v, %v; want it back, added", kept, added, err)
		}
		again := sample("job-1", "alice", base.Add(time.Hour))
		again.CostMicros, again.Quantity = 1, 1
		kept, added, err = st.AddUsage(ctx, again)
		if err != nil || added || !same(kept, first) {
			t.Errorf("AddUsage(same job again) = %+v, %v, %v; want the first record kept, not added", kept, added, err)
		}
		// The job is the key, not the owner: another owner's record of the job is refused too.
		other := sample("job-1", "bob", base)
		kept, added, err = st.AddUsage(ctx, other)
		if err != nil || added || !same(kept, first) {
			t.Errorf("AddUsage(same job, another owner) = %+v, %v, %v; want the first record kept, not added", kept, added, err)
		}
		recs := scanAll(t, st, "alice", time.Time{}, time.Time{})
		if len(recs) != 1 || !same(recs[0], first) {
			t.Errorf("ScanUsage(alice) after three adds of one job = %+v; want [%+v]", recs, first)
		}
		if ids := scan(t, st, "bob", time.Time{}, time.Time{}); len(ids) != 0 {
			t.Errorf("ScanUsage(bob) = %v; want none (the job was alice's first)", ids)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		const jobs, tries = 20, 4
		var wg sync.WaitGroup
		kept := make([][tries]core.Usage, jobs)
		addedBy := make([][tries]bool, jobs)
		for j := range jobs {
			for k := range tries {
				wg.Go(func() {
					// Each try is a different record of the same job: whichever is added, every
					// try must be answered with that one.
					u := sample(fmt.Sprintf("job-%02d", j), "alice", base.Add(time.Duration(k)*time.Second))
					var err error
					kept[j][k], addedBy[j][k], err = st.AddUsage(ctx, u)
					if err != nil {
						t.Errorf("AddUsage(%s) = %v; want nil", u.JobID, err)
					}
				})
			}
		}
		wg.Wait()
		for j := range jobs {
			n, winner := 0, -1
			for k := range tries {
				if addedBy[j][k] {
					n, winner = n+1, k
				}
			}
			if n != 1 {
				t.Errorf("job-%02d: %d of %d concurrent AddUsage calls added it; want 1", j, n, tries)
				continue
			}
			for k := range tries {
				if !same(kept[j][k], kept[j][winner]) {
					t.Errorf("job-%02d: try %d was answered %+v; want the record added, %+v", j, k, kept[j][k], kept[j][winner])
				}
			}
		}
		if ids := scan(t, st, "alice", time.Time{}, time.Time{}); len(ids) != jobs {
			t.Errorf("ScanUsage = %d records; want %d", len(ids), jobs)
		}
	})

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		want := core.Usage{
			Charge: core.Charge{Model: "gantry-speech", Unit: "second", Measure: "milliseconds", Quantity: 12_345,
				UnitsMicros: 12_345_000, PriceMicros: 1_500, CostMicros: core.CostMicros(12_345_000, 1_500)},
			JobID: "0a1b2c3d-4e5f-6789-abcd-ef0123456789", Owner: "carol.smith_1", At: base,
		}
		add(t, st, want)
		recs := scanAll(t, st, want.Owner, time.Time{}, time.Time{})
		if len(recs) != 1 || !same(recs[0], want) {
			t.Errorf("ScanUsage(%q) = %+v; want [%+v]", want.Owner, recs, want)
		}
	})

	t.Run("ScanOrderAndRange", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		// Added out of order; two records share a time (ordered by job id then).
		for _, u := range []core.Usage{
			sample("c", "alice", base.Add(2*time.Second)),
			sample("a", "alice", base),
			sample("e", "alice", base.Add(3*time.Second)),
			sample("b2", "alice", base.Add(time.Second)),
			sample("b1", "alice", base.Add(time.Second)),
			sample("x", "bob", base.Add(time.Second)),
			sample("y", "alice2", base.Add(time.Second)),
			sample("z", "al", base.Add(time.Second)),
			sample("old", "alice", base.Add(-24*time.Hour*400)), // over a year before: sign and width of times
			sample("older", "alice", time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)),
		} {
			add(t, st, u)
		}
		tests := []struct {
			owner    string
			from, to time.Time
			want     []string
		}{
			{"alice", time.Time{}, time.Time{}, []string{"older", "old", "a", "b1", "b2", "c", "e"}},
			{"alice", base, time.Time{}, []string{"a", "b1", "b2", "c", "e"}},
			{"alice", base.Add(time.Second), base.Add(3 * time.Second), []string{"b1", "b2", "c"}}, // to is exclusive
			{"alice", time.Time{}, base, []string{"older", "old"}},
			{"alice", base.Add(time.Second + time.Nanosecond), base.Add(2*time.Second + time.Nanosecond), []string{"c"}},
			{"alice", base.Add(time.Second).UTC(), base.Add(2 * time.Second).In(time.FixedZone("UTC-7", -7*60*60)), []string{"b1", "b2"}}, // zones do not matter
			{"alice", base.Add(time.Hour), base.Add(2 * time.Hour), nil},
			{"bob", time.Time{}, time.Time{}, []string{"x"}},
			{"al", time.Time{}, time.Time{}, []string{"z"}}, // a prefix of alice's name
			{"carol", time.Time{}, time.Time{}, nil},
		}
		for _, tt := range tests {
			if got := scan(t, st, tt.owner, tt.from, tt.to); !slices.Equal(got, tt.want) {
				t.Errorf("ScanUsage(%q, %v, %v) = %v; want %v", tt.owner, tt.from, tt.to, got, tt.want)
			}
		}
		var first []string
		err := st.ScanUsage(ctx, "alice", time.Time{}, time.Time{}, func(u core.Usage) bool { first = append(first, u.JobID); return len(first) < 2 })
		if err != nil || !slices.Equal(first, []string{"older", "old"}) {
			t.Errorf("ScanUsage stopped by fn after 2 = %v, %v; want [older old], nil", first, err)
		}
	})

	t.Run("ContextDone", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		add(t, st, sample("kept", "alice", base))
		for _, dc := range doneContexts(t) {
			_, added, err := st.AddUsage(dc.ctx, sample("new-job", "alice", base.Add(time.Second)))
			checkDone(t, dc, "AddUsage(new)", err)
			if added {
				t.Errorf("AddUsage(new) with a context %s reported added", dc.name)
			}
			err = st.ScanUsage(dc.ctx, "alice", time.Time{}, time.Time{}, func(core.Usage) bool {
				t.Errorf("ScanUsage with a context %s called fn", dc.name)
				return false
			})
			checkDone(t, dc, "ScanUsage(alice)", err)
		}
		if ids := scan(t, st, "alice", time.Time{}, time.Time{}); !slices.Equal(ids, []string{"kept"}) {
			t.Errorf("ScanUsage(alice) after refused adds = %v; want [kept]", ids)
		}
	})

	t.Run("ContextEndsMidScan", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		for i := range 5 {
			add(t, st, sample(fmt.Sprintf("job-%d", i), "alice", base.Add(time.Duration(i)*time.Second)))
		}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var seen []string
		err := st.ScanUsage(cctx, "alice", time.Time{}, time.Time{}, func(u core.Usage) bool {
			seen = append(seen, u.JobID)
			cancel() // the report's client went away
			return true
		})
		if !errors.Is(err, context.Canceled) || len(seen) == 5 {
			t.Errorf("ScanUsage cancelled by its first record = %v after %v; want context.Canceled before the end", err, seen)
		}
	})

	t.Run("Durable", func(t *testing.T) {
		t.Parallel()
		st, reopen := open(t)
		reopen = durable(t, reopen)
		want := []core.Usage{sample("job-a", "alice", base), sample("job-b", "alice", base.Add(time.Minute))}
		for _, u := range want {
			add(t, st, u)
		}
		st = reopen()
		got := scanAll(t, st, "alice", time.Time{}, time.Time{})
		if len(got) != len(want) || !same(got[0], want[0]) || !same(got[1], want[1]) {
			t.Errorf("ScanUsage(alice) after a restart = %+v; want %+v", got, want)
		}
		// The ledger still holds one record per job after a restart.
		kept, added, err := st.AddUsage(ctx, sample("job-a", "alice", base.Add(time.Hour)))
		if err != nil || added || !same(kept, want[0]) {
			t.Errorf("AddUsage(job-a again) after a restart = %+v, %v, %v; want the first record kept, not added", kept, added, err)
		}
	})
}
