package scheduler

import (
	"context"
	rtmetrics "runtime/metrics"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// k is a test key: the byte i.
func k(i int) core.JobKey { var key core.JobKey; key[0], key[1] = byte(i), byte(i>>8); return key }

func TestQueuesFIFOAndBatches(t *testing.T) {
	t.Parallel()
	var q Queues
	for i := range 5 {
		q.Enqueue("ep", k(i))
	}
	q.Enqueue("other", k(99))
	ctx := context.Background()
	if got := q.Take(ctx, "ep", 2); !slices.Equal(got, []core.JobKey{k(0), k(1)}) {
		t.Errorf("Take(2) = %v; want [0 1]", got)
	}
	if got := q.Take(ctx, "ep", 10); !slices.Equal(got, []core.JobKey{k(2), k(3), k(4)}) {
		t.Errorf("Take(10) = %v; want [2 3 4]", got)
	}
	if q.Len("ep") != 0 || q.Len("other") != 1 {
		t.Errorf("Len = %d, %d; want 0, 1", q.Len("ep"), q.Len("other"))
	}
}

func TestQueuesWakeParkedWorker(t *testing.T) {
	t.Parallel()
	var q Queues
	got := make(chan []core.JobKey)
	go func() { got <- q.Take(context.Background(), "ep", 1) }()
	for q.Parked("ep") == 0 {
		time.Sleep(time.Millisecond) // wait until the worker is parked
	}
	q.Enqueue("ep", k(7))
	select {
	case ids := <-got:
		if !slices.Equal(ids, []core.JobKey{k(7)}) {
			t.Errorf("parked Take = %v; want [a]", ids)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the parked worker was not woken")
	}
}

func TestQueuesCancelledTakeReturnsNothing(t *testing.T) {
	t.Parallel()
	var q Queues
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if got := q.Take(ctx, "ep", 1); got != nil {
		t.Errorf("Take on an empty queue = %v; want nil once ctx ends", got)
	}
	if q.Parked("ep") != 0 {
		t.Errorf("a cancelled Take stayed parked")
	}
}

// TestQueuesNoLostWakeups: many workers and many jobs, with workers leaving at random; every
// job is taken exactly once.
func TestQueuesNoLostWakeups(t *testing.T) {
	t.Parallel()
	var q Queues
	const jobs, workers = 5000, 32
	var mu sync.Mutex
	seen := map[core.JobKey]int{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				tctx, tcancel := context.WithTimeout(ctx, time.Duration(1+(w+i)%5)*time.Millisecond)
				ids := q.Take(tctx, "ep", 1+w%3)
				tcancel()
				mu.Lock()
				for _, id := range ids {
					seen[id]++
				}
				mu.Unlock()
			}
		}()
	}
	for i := range jobs {
		q.Enqueue("ep", k(i))
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == jobs || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if len(seen) != jobs {
		t.Fatalf("%d of %d jobs taken", len(seen), jobs)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %s taken %d times", id, n)
		}
	}
}

// key3 is a test key unique for i below 2^24.
func key3(i int) core.JobKey {
	var key core.JobKey
	key[0], key[1], key[2] = byte(i), byte(i>>8), byte(i>>16)
	return key
}

func TestQueuesFIFOAcrossBlocks(t *testing.T) {
	t.Parallel()
	var q Queues
	const n = 3*queueBlock + 17
	for i := range n {
		q.Enqueue("ep", key3(i))
	}
	if got := q.Head("ep", queueBlock+5, nil); len(got) != queueBlock+5 || got[0].Key != key3(0) || got[queueBlock+4].Key != key3(queueBlock+4) {
		t.Fatalf("Head(%d) = %d keys, first %v; want %d keys from 0 on", queueBlock+5, len(got), got[0].Key, queueBlock+5)
	}
	next := 0
	for _, batch := range []int{1, queueBlock - 2, 3, 2 * queueBlock, 15} {
		got := q.Take(context.Background(), "ep", batch)
		for _, key := range got {
			if key != key3(next) {
				t.Fatalf("key %d taken is %v; want %v", next, key, key3(next))
			}
			next++
		}
		if want := n - next; q.Len("ep") != want {
			t.Fatalf("Len = %d after %d taken; want %d", q.Len("ep"), next, want)
		}
		if head := q.Head("ep", 2, nil); q.Len("ep") > 0 && head[0].Key != key3(next) {
			t.Fatalf("Head after %d taken starts at %v; want %v", next, head[0].Key, key3(next))
		}
	}
	if next != n {
		t.Fatalf("took %d keys; want %d", next, n)
	}
	q.Enqueue("ep", key3(n)) // an emptied queue takes keys again
	if got := q.Take(context.Background(), "ep", 5); !slices.Equal(got, []core.JobKey{key3(n)}) {
		t.Errorf("Take after emptying = %v; want [%v]", got, key3(n))
	}
}

// A long queue grows a block at a time: one Enqueue never allocates (and copies) anything the
// size of the queue, which held the endpoint's lock, and so its /run, for tens of ms at 1M keys.
// Not parallel: it reads the process's allocation counter.
func TestQueuesEnqueueNeverCopiesTheQueue(t *testing.T) {
	var q Queues
	sample := []rtmetrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	allocated := func() uint64 { rtmetrics.Read(sample); return sample[0].Value.Uint64() }
	const n, step = 400000, 1000
	// The runtime counts allocations in lumps (up to 0.7 MB were seen here), so the bound is
	// loose: 1000 Enqueues fill a block or two (24 KiB each), while one slice of all the keys
	// grew by a quarter at a time, over 4 MiB at once past 140k keys.
	const most = 4 << 20
	for i := 0; i < n; i += step {
		before := allocated()
		for j := i; j < i+step; j++ {
			q.Enqueue("ep", key3(j))
		}
		if got := allocated() - before; got > most {
			t.Fatalf("%d Enqueues at %d keys queued allocated %d bytes; want at most %d", step, i, got, most)
		}
	}
}
