// Package storetest holds the conformance suites of the store ports core declares, one suite
// per port: RunEndpointStore and RunTemplateStore (endpoints.go), RunKeyStore (keys.go),
// RunUsageStore (usage.go), RunFileStore (files.go), RunWorkerTokenStore (secrets.go),
// RunRateLimits (ratelimit.go) and RunLeases (leases.go). Every implementation runs the suite of
// each port it implements from its own tests, with an Opener, so that the embedded stores and
// the shared ones of later replicas answer alike.
//
// The suites test the contract, not an implementation: not-found errors, overwrites, listing
// order and cursors, owners kept apart, idempotence, concurrency, a done context, and
// durability across a restart where the port promises it.
//
// The suites use record ids of the form core.NewID makes ([a-z0-9]), owners that are valid user
// names, and times of microsecond precision; times are compared with time.Time.Equal.
package storetest

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Opener opens a store for a suite. It returns a store on fresh, empty storage, released
// through t.Cleanup, and reopen, which closes that store and opens the same storage again as a
// restart would, returning the new store (also released through t.Cleanup; reopen may be
// called again). reopen is nil for a store that keeps nothing across a restart (one in
// memory): the suite then skips its durability tests.
type Opener[S any] func(t *testing.T) (s S, reopen func() S)

// base is the creation time of the first record; later records are a second apart. Its zone is
// not UTC so that stores which normalise zones are still compared with Equal.
var base = time.Date(2025, time.March, 14, 15, 9, 26, 535_897_000, time.FixedZone("UTC+2", 2*60*60))

// doneContext is a context that has ended, and the error a store must wrap when given it.
type doneContext struct {
	name string
	ctx  context.Context
	want error
}

// doneContexts returns a cancelled context and one past its deadline.
func doneContexts(t *testing.T) []doneContext {
	t.Helper()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	t.Cleanup(cancel)
	return []doneContext{
		{"canceled", canceled, context.Canceled},
		{"past its deadline", expired, context.DeadlineExceeded},
	}
}

// checkDone reports a call that did not fail with dc's error.
func checkDone(t *testing.T, dc doneContext, call string, err error) {
	t.Helper()
	if !errors.Is(err, dc.want) {
		t.Errorf("%s with a context %s: err = %v; want %v", call, dc.name, err, dc.want)
	}
}

// durable skips the test when the store keeps nothing across a restart, and returns reopen.
func durable[S any](t *testing.T, reopen func() S) func() S {
	t.Helper()
	if reopen == nil {
		t.Skip("the store keeps nothing across a restart")
	}
	return reopen
}
