package memq

import (
	"container/heap"
	"math/rand/v2"
	"reflect"
	rtmetrics "runtime/metrics"
	"testing"

	"github.com/gantryhq/gantry/core"
)

func TestDeadlinesComeDueInOrderAcrossBlocks(t *testing.T) {
	t.Parallel()
	var h deadlines
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 3*deadlineBlock + 5
	for i := range n {
		heap.Push(&h, deadline{at: rng.Int64N(1 << 40), key: core.JobKey{byte(i), byte(i >> 8)}})
	}
	// Pop half, push more, so the heap shrinks and grows across block edges.
	last := int64(-1)
	for range n / 2 {
		d := heap.Pop(&h).(deadline)
		if d.at < last {
			t.Fatalf("deadline at %d came after one at %d", d.at, last)
		}
		last = d.at
	}
	for range deadlineBlock {
		heap.Push(&h, deadline{at: last + 1 + rng.Int64N(1<<40)})
	}
	want := n - n/2 + deadlineBlock
	if h.Len() != want {
		t.Fatalf("Len = %d; want %d", h.Len(), want)
	}
	for h.Len() > 0 {
		d := heap.Pop(&h).(deadline)
		if d.at < last {
			t.Fatalf("deadline at %d came after one at %d", d.at, last)
		}
		last = d.at
	}
	if len(h.blocks) > 1 {
		t.Errorf("an empty heap keeps %d blocks; want at most 1", len(h.blocks))
	}
}

// Scheduling a deadline never allocates (and copies) anything the size of the heap: one slice
// of all deadlines did, under the lock every insert takes. Not parallel: it reads the
// process's allocation counter.
func TestScheduleNeverCopiesTheDeadlines(t *testing.T) {
	s, err := Open(NewRecords(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	sample := []rtmetrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	allocated := func() uint64 { rtmetrics.Read(sample); return sample[0].Value.Uint64() }
	const n, step = 400000, 1000
	// The runtime counts allocations in lumps (up to 0.7 MB were seen), so the bound is loose:
	// 1000 deadlines fill a block or two (32 KiB each), while one slice of all of them grew by
	// a quarter at a time, over 4 MiB at once past 110k deadlines.
	const most = 4 << 20
	for i := 0; i < n; i += step {
		before := allocated()
		for j := i; j < i+step; j++ {
			s.schedule(&s.expiry, core.JobKey{byte(j), byte(j >> 8), byte(j >> 16)}, int64(j))
		}
		if got := allocated() - before; got > most {
			t.Fatalf("%d deadlines at %d scheduled allocated %d bytes; want at most %d", step, i, got, most)
		}
	}
}

// The index's slots hold no pointers (a job's extras live apart, in its shard's extras), so
// the garbage collector never scans the index: a million queued jobs made each mark phase over
// 100 ms long, slowing every request it overlapped.
func TestIndexEntriesHoldNoPointers(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[slot]()
	for i := range typ.NumField() {
		switch f := typ.Field(i); f.Type.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Slice, reflect.String, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
			t.Errorf("slot.%s is a %s: the index would be scanned by the garbage collector", f.Name, f.Type)
		}
	}
}
