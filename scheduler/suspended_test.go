package scheduler

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

func TestSuspendedWorkers(t *testing.T) {
	t.Parallel()
	pl := placer(t, core.PoolInfo{ID: "A", GPUs: 4}, core.PoolInfo{ID: "B", GPUs: 4})
	sw := newSuspendedWorkers(pl)
	at := time.Unix(1000, 0)
	rec := func(pool string, pinned bool, suspendedAt int) *workerRec {
		return &workerRec{res: &Reservation{s: pl.slots[pool]}, pinned: pinned, susAt: at.Add(time.Duration(suspendedAt) * time.Second)}
	}
	oldPinned, newA, oldA, b := rec("A", true, 0), rec("A", false, 5), rec("A", false, 3), rec("B", false, 1)
	for _, w := range []*workerRec{oldPinned, newA, oldA, b, oldA} { // a second add is harmless
		sw.add(w)
	}
	if n := sw.pools["A"].n.Load(); n != 3 {
		t.Fatalf("pool A counts %d suspended workers, want 3", n)
	}
	if got := sw.reclaimable([]string{"nope"}); got != nil {
		t.Fatalf("an unknown pool gave %p", got)
	}
	// FLASHBOOT before PRIORITY_FLASHBOOT, then the longest suspended, over the pools given.
	for i, want := range []*workerRec{b, oldA, newA, oldPinned, nil} {
		if got := sw.reclaimable([]string{"A", "B"}); got != want {
			t.Fatalf("reclaim %d took %+v, want %+v", i, got, want)
		}
	}
	if sw.remove(oldA) {
		t.Fatal("a reclaimed worker was removed again")
	}

	// Concurrent resumes and reclaims: each worker is taken exactly once.
	var ws []*workerRec
	for i := range 200 {
		w := rec([]string{"A", "B"}[i%2], i%3 == 0, i)
		ws = append(ws, w)
		sw.add(w)
	}
	var taken atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i, w := range ws {
				if (i+g)%2 == 0 && sw.remove(w) {
					taken.Add(1)
				}
				if w := sw.reclaimable([]string{"B", "A"}); w != nil {
					taken.Add(1)
				}
			}
		})
	}
	wg.Wait()
	for sw.reclaimable([]string{"A", "B"}) != nil {
		taken.Add(1)
	}
	if taken.Load() != int64(len(ws)) || sw.pools["A"].n.Load() != 0 || sw.pools["B"].n.Load() != 0 {
		t.Fatalf("%d of %d workers taken; left A %d, B %d", taken.Load(), len(ws), sw.pools["A"].n.Load(), sw.pools["B"].n.Load())
	}
}
