package scheduler

import (
	"fmt"

	"github.com/sourcegraph/conc/panics"
)

// This file runs the scheduler's calls into adapters (Pool and the interfaces a pool may add).
// To the scheduler an adapter is someone else's code: a panic in one is caught and becomes
// the call's error, so a buggy adapter fails its worker (shown on /health and the worker list)
// instead of ending the server. A panic in the scheduler's own code is not caught: its locks
// and counts could no longer be trusted.

// AdapterPanic is the error of an adapter call that panicked. Its message leaves the pool out:
// the messages it ends up in name it already.
type AdapterPanic struct {
	Pool, Call string // the pool's id and the method, e.g. "Start"
	Value      any    // what the adapter panicked with
}

func (p *AdapterPanic) Error() string {
	return fmt.Sprintf("the adapter panicked in %s: %v", p.Call, p.Value)
}

// adapterCall runs fn, one call of pool's adapter about a worker, and returns its error, or an
// *AdapterPanic when it panicked (logged with the adapter's stack).
func (s *Scheduler) adapterCall(pool, call, worker string, fn func() error) error {
	var err error
	if r := panics.Try(func() { err = fn() }); r != nil {
		s.cfg.Log.Error("an adapter panicked", "pool", pool, "call", call, "worker", worker, "panic", r.Value,
			"stack", string(r.Stack))
		return &AdapterPanic{Pool: pool, Call: call, Value: r.Value}
	}
	return err
}
