package pebble

import (
	"errors"
	"sync/atomic"
	"time"
)

// ErrClosed is what every operation on a closed Store returns. Pebble itself panics when a
// closed database is used; the Store answers an error instead, so a late caller (a worker's
// exit reported after shutdown, a webhook's delivery mark) fails loudly in the log but cannot
// crash the server.
var ErrClosed = errors.New("the store is closed")

// gate keeps Close from closing the database under an operation in flight, and turns away the
// operations that come after it. An operation enters (one atomic add, and a load), and leaves;
// Close marks the gate shut, then waits for those inside. With Go's sequentially consistent
// atomics, either an operation sees the mark and backs out, or Close sees it inside and waits.
// Operations may nest (a list reads each record): the gate is a count, not a lock.
type gate struct {
	inside atomic.Int64
	shut   atomic.Bool
}

// enter lets an operation in, or returns ErrClosed. Call leave when it is done.
func (g *gate) enter() error {
	g.inside.Add(1)
	if g.shut.Load() {
		g.inside.Add(-1)
		return ErrClosed
	}
	return nil
}

func (g *gate) leave() { g.inside.Add(-1) }

// close shuts the gate and waits for the operations inside to leave.
func (g *gate) close() {
	g.shut.Store(true)
	for d := 10 * time.Microsecond; g.inside.Load() > 0; d = min(2*d, 10*time.Millisecond) {
		time.Sleep(d)
	}
}
