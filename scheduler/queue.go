// Package scheduler places work: per-endpoint queues that hand jobs to long-polling workers,
// and the worker manager that starts workers on pools through adapters.
package scheduler

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/gantryhq/gantry/core"
)

// Queues is the dispatcher: one FIFO of job keys per endpoint, and the workers parked waiting on
// it. Enqueue wakes one parked worker. Keys of jobs cancelled while queued stay until taken; the
// job engine skips them. Keys hold no pointers, so a long queue costs the GC nothing to scan.
type Queues struct {
	eps sync.Map // endpoint -> *queue, each with its own lock
	// OnEnqueue, when set, is called (without locks held) after each Enqueue: the scheduler
	// uses it to start a worker at once on an endpoint that has none.
	OnEnqueue func(endpoint string)
	// Clock stamps enqueued keys (the autoscaler reads the oldest one's wait); nil = real time.
	Clock core.Clock
}

// Queued is a key in a queue and when it was enqueued (Unix nanoseconds).
type Queued struct {
	Key core.JobKey
	At  int64
}

// queueBlock is how many keys one block of a queue holds (24 KiB). A queue grows and shrinks
// a block at a time, so neither Enqueue nor Take ever copies the queue under its lock: one
// slice of all keys did, at each growth and compaction, and with a million keys queued that
// held every /run of the endpoint for tens of milliseconds, a stall that grew with the backlog.
const queueBlock = 1024

type queue struct {
	mu sync.Mutex
	// blocks hold the keys oldest first: the first from head on, the last up to its length;
	// every block but the last is full.
	blocks  [][]Queued
	head    int
	n       int
	waiters []chan struct{}
}

func (q *queue) len() int { return q.n }

func (q *queue) push(e Queued) {
	if k := len(q.blocks); k == 0 || len(q.blocks[k-1]) == queueBlock {
		q.blocks = append(q.blocks, make([]Queued, 0, queueBlock))
	}
	last := &q.blocks[len(q.blocks)-1]
	*last = append(*last, e)
	q.n++
}

func (q *queue) pop(max int) []core.JobKey {
	out := make([]core.JobKey, min(max, q.n))
	for i := range out {
		b := q.blocks[0]
		out[i] = b[q.head].Key
		q.head++
		if q.head == len(b) { // the oldest block is drained
			if len(q.blocks) == 1 {
				q.blocks[0] = b[:0] // the only one: reuse it
			} else {
				q.blocks[0] = nil
				q.blocks = q.blocks[1:]
			}
			q.head = 0
		}
	}
	q.n -= len(out)
	return out
}

func (qs *Queues) queue(endpoint string) *queue {
	if v, ok := qs.eps.Load(endpoint); ok {
		return v.(*queue)
	}
	v, _ := qs.eps.LoadOrStore(endpoint, &queue{})
	return v.(*queue)
}

// Enqueue appends a job key and wakes one parked worker of the endpoint.
func (qs *Queues) Enqueue(endpoint string, id core.JobKey) {
	var at int64
	if qs.Clock != nil {
		at = qs.Clock.Now().UnixNano()
	} else {
		at = time.Now().UnixNano()
	}
	q := qs.queue(endpoint)
	q.mu.Lock()
	q.push(Queued{Key: id, At: at})
	qs.wakeOne(q)
	q.mu.Unlock()
	if qs.OnEnqueue != nil {
		qs.OnEnqueue(endpoint)
	}
}

// wakeOne signals the oldest parked worker; q.mu is held.
func (qs *Queues) wakeOne(q *queue) {
	if len(q.waiters) > 0 {
		w := q.waiters[0]
		q.waiters = q.waiters[1:]
		w <- struct{}{} // buffered: never blocks
	}
}

// Take returns up to max keys of the endpoint, waiting until there is one or ctx ends.
func (qs *Queues) Take(ctx context.Context, endpoint string, max int) []core.JobKey {
	q := qs.queue(endpoint)
	for {
		q.mu.Lock()
		if q.len() > 0 {
			ids := q.pop(max)
			if q.len() > 0 {
				qs.wakeOne(q) // more work: pass the baton
			}
			q.mu.Unlock()
			return ids
		}
		ch := make(chan struct{}, 1)
		q.waiters = append(q.waiters, ch)
		q.mu.Unlock()
		select {
		case <-ch:
			continue
		case <-ctx.Done():
			q.mu.Lock()
			if i := slices.Index(q.waiters, ch); i >= 0 {
				q.waiters = slices.Delete(q.waiters, i, i+1)
			} else if q.len() > 0 {
				qs.wakeOne(q) // we were woken but leave: hand the wake-up on
			}
			q.mu.Unlock()
			return nil
		}
	}
}

// Head appends up to n of the endpoint's oldest queued keys to buf (stale ones included).
func (qs *Queues) Head(endpoint string, n int, buf []Queued) []Queued {
	v, ok := qs.eps.Load(endpoint)
	if !ok {
		return buf
	}
	return v.(*queue).headInto(n, buf)
}

// headInto appends up to n of the queue's oldest keys to buf.
func (q *queue) headInto(n int, buf []Queued) []Queued {
	q.mu.Lock()
	defer q.mu.Unlock()
	from := q.head
	for _, b := range q.blocks {
		if n <= 0 {
			break
		}
		part := b[from:min(len(b), from+n)]
		buf = append(buf, part...)
		n -= len(part)
		from = 0
	}
	return buf
}

// Len returns the number of ids queued for the endpoint (stale ones included).
func (qs *Queues) Len(endpoint string) int {
	q := qs.queue(endpoint)
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.len()
}

// Parked returns the number of workers waiting on the endpoint.
func (qs *Queues) Parked(endpoint string) int {
	q := qs.queue(endpoint)
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters)
}
