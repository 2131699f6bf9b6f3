package scheduler

import (
	"context"
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
