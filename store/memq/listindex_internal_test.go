package memq

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gantryhq/gantry/core"
)

// A seqIndex holds what a sorted set would, through inserts out of order (block splits),
// removals anywhere (empty blocks dropped, small ones merged) and pages from any cursor.
func TestSeqIndexMatchesASortedSet(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	var x seqIndex
	var want []uint64 // ascending
	check := func(step int) {
		t.Helper()
		if x.n != len(want) {
			t.Fatalf("step %d: n = %d; want %d", step, x.n, len(want))
		}
		for bi, b := range x.blocks {
			if len(b) == 0 || len(b) > ixBlock {
				t.Fatalf("step %d: block %d holds %d entries; want 1..%d", step, bi, len(b), ixBlock)
			}
		}
		before := uint64(0)
		if len(want) > 0 && rng.IntN(4) > 0 {
			before = want[rng.IntN(len(want))] + uint64(rng.IntN(2)) // on an entry, or between two
		}
		n := 1 + rng.IntN(3*ixBlock)
		var got []uint64
		for _, e := range x.below(before, n, nil) {
			got = append(got, e.seq())
		}
		var exp []uint64
		for i := len(want) - 1; i >= 0 && len(exp) < n; i-- {
			if before == 0 || want[i] < before {
				exp = append(exp, want[i])
			}
		}
		if !slices.Equal(got, exp) {
			t.Fatalf("step %d: below(%d, %d) = %v; want %v", step, before, n, got, exp)
		}
	}
	next := uint64(1)
	for step := range 20000 {
		switch r := rng.IntN(10); {
		case r < 5 || len(want) == 0: // a new job, a few places from the tail at most
			seq := next + uint64(rng.IntN(4))
			next = seq + 1
			if _, dup := slices.BinarySearch(want, seq); dup {
				continue
			}
			x.add(newIxEntry(seq, core.JobKey{byte(seq)}))
			i, _ := slices.BinarySearch(want, seq)
			want = slices.Insert(want, i, seq)
		case r < 6: // an old job that comes back (an insert raced far behind)
			seq := uint64(rng.Int64N(int64(next)))
			if _, dup := slices.BinarySearch(want, seq); dup || seq == 0 {
				continue
			}
			x.add(newIxEntry(seq, core.JobKey{byte(seq)}))
			i, _ := slices.BinarySearch(want, seq)
			want = slices.Insert(want, i, seq)
		case r < 8: // the oldest expires
			if !x.remove(want[0]) {
				t.Fatalf("step %d: remove(%d) found nothing", step, want[0])
			}
			want = want[1:]
		default: // any one
			i := rng.IntN(len(want))
			if !x.remove(want[i]) {
				t.Fatalf("step %d: remove(%d) found nothing", step, want[i])
			}
			want = slices.Delete(want, i, i+1)
		}
		if x.remove(next + 100) {
			t.Fatalf("step %d: remove of an absent seq found one", step)
		}
		if step%50 == 0 {
			check(step)
		}
	}
	check(-1)
}

func TestIxEntryKeepsTheKey(t *testing.T) {
	t.Parallel()
	for _, sync := range []bool{false, true} {
		k := core.NewJobKey(sync)
		e := newIxEntry(maxSeq, k)
		if e.key() != k || e.seq() != maxSeq {
			t.Errorf("entry of (%d, %s) reads back (%d, %s)", uint64(maxSeq), k, e.seq(), e.key())
		}
	}
}
