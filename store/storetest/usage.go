package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// RunUsageStore runs the conformance suite against a usage ledger. open must return a fresh,
// empty store on each call and release it through t.Cleanup. Job ids are of the form
// core.ParseJobKey accepts or any [a-z0-9-] string; owners are valid user names or
// core.PlatformOwner-like names.
func RunUsageStore(t *testing.T, open func(t *testing.T) core.UsageStore) {
	t.Helper()
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
	scan := func(t *testing.T, st core.UsageStore, owner string, from, to time.Time) []string {
		t.Helper()
		var ids []string
		if err := st.ScanUsage(owner, from, to, func(u core.Usage) bool { ids = append(ids, u.JobID); return true }); err != nil {
			t.Fatalf("ScanUsage(%q, %v, %v) = %v; want nil", owner, from, to, err)
		}
		return ids
	}

	t.Run("OncePerJob", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		first := sample("job-1", "alice", base)
		kept, added, err := st.AddUsage(first)
		if err != nil || !added || !same(kept, first) {
			t.Fatalf("AddUsage(first) = %+v, %v, %v; want it back, added", kept, added, err)
		}
		again := sample("job-1", "alice", base.Add(time.Hour))
		again.CostMicros, again.Quantity = 1, 1
		kept, added, err = st.AddUsage(again)
		if err != nil || added || !same(kept, first) {
			t.Errorf("AddUsage(same job again) = %+v, %v, %v; want the first record kept, not added", kept, added, err)
		}
		if ids := scan(t, st, "alice", time.Time{}, time.Time{}); !slices.Equal(ids, []string{"job-1"}) {
			t.Errorf("ScanUsage after two adds of one job = %v; want one record", ids)
		}
		var got core.Usage
		_ = st.ScanUsage("alice", time.Time{}, time.Time{}, func(u core.Usage) bool { got = u; return true })
		if !same(got, first) {
			t.Errorf("ScanUsage record = %+v; want %+v", got, first)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		const jobs, tries = 20, 4
		addedN := make(chan bool, jobs*tries)
		done := make(chan struct{})
		for j := range jobs {
			for k := range tries {
				go func() {
					defer func() { done <- struct{}{} }()
					_, added, err := st.AddUsage(sample(fmt.Sprintf("job-%02d", j), "alice", base.Add(time.Duration(k)*time.Second)))
					if err != nil {
						t.Errorf("AddUsage = %v", err)
					}
					addedN <- added
				}()
			}
		}
		for range jobs * tries {
			<-done
		}
		close(addedN)
		n := 0
		for a := range addedN {
			if a {
				n++
			}
		}
		if n != jobs {
			t.Errorf("concurrent AddUsage of %d jobs, %d times each, added %d records; want %d", jobs, tries, n, jobs)
		}
		if ids := scan(t, st, "alice", time.Time{}, time.Time{}); len(ids) != jobs {
			t.Errorf("ScanUsage = %d records; want %d", len(ids), jobs)
		}
	})

	t.Run("ScanOrderAndRange", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		// Added out of order; two records share a time (ordered by job id then).
		for _, u := range []core.Usage{
			sample("c", "alice", base.Add(2*time.Second)),
			sample("a", "alice", base),
			sample("e", "alice", base.Add(3*time.Second)),
			sample("b2", "alice", base.Add(time.Second)),
			sample("b1", "alice", base.Add(time.Second)),
			sample("x", "bob", base.Add(time.Second)),
			sample("y", "alice2", base.Add(time.Second)),
			sample("old", "alice", base.Add(-24*time.Hour*400)), // over a year before: sign and width of times
		} {
			if _, _, err := st.AddUsage(u); err != nil {
				t.Fatalf("AddUsage(%s) = %v", u.JobID, err)
			}
		}
		tests := []struct {
			owner    string
			from, to time.Time
			want     []string
		}{
			{"alice", time.Time{}, time.Time{}, []string{"old", "a", "b1", "b2", "c", "e"}},
			{"alice", base, time.Time{}, []string{"a", "b1", "b2", "c", "e"}},
			{"alice", base.Add(time.Second), base.Add(3 * time.Second), []string{"b1", "b2", "c"}}, // to is exclusive
			{"alice", time.Time{}, base, []string{"old"}},
			{"alice", base.Add(time.Second + time.Nanosecond), base.Add(2*time.Second + time.Nanosecond), []string{"c"}},
			{"bob", time.Time{}, time.Time{}, []string{"x"}},
			{"carol", time.Time{}, time.Time{}, nil},
		}
		for _, tt := range tests {
			if got := scan(t, st, tt.owner, tt.from, tt.to); !slices.Equal(got, tt.want) {
				t.Errorf("ScanUsage(%q, %v, %v) = %v; want %v", tt.owner, tt.from, tt.to, got, tt.want)
			}
		}
		var first []string
		_ = st.ScanUsage("alice", time.Time{}, time.Time{}, func(u core.Usage) bool { first = append(first, u.JobID); return len(first) < 2 })
		if !slices.Equal(first, []string{"old", "a"}) {
			t.Errorf("ScanUsage stopped by fn after 2 = %v; want [old a]", first)
		}
	})
}
