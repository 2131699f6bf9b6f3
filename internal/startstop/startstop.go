// Package startstop gives Gantry's long-running services one lifecycle: Start(ctx) launches
// their goroutines and returns, Stop cancels them and waits until every one has returned.
// The scheduler, the elector, the PostgreSQL job engine, the key cache and webhook delivery
// embed a Group, so a reader meets the same two calls everywhere (after river's startstop).
package startstop

import (
	"context"
	"errors"
	"sync"
)

// Service is what a long-running part of the server implements.
type Service interface {
	// Start launches the service's goroutines, bound to ctx, and returns without waiting for
	// them. Starting a started service is an error (ErrStarted).
	Start(ctx context.Context) error
	// Stop cancels the goroutines Start launched and waits for them to return. Stopping a
	// service that is not running does nothing, so Stop may be deferred unconditionally.
	Stop()
}

// ErrStarted is Start's error on a service that runs already.
var ErrStarted = errors.New("already started")

// Group tracks a service's goroutines between a Start and a Stop. The zero value is ready.
type Group struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Begin marks the service started under ctx and returns the context its goroutines run with
// (cancelled by Stop or when ctx ends); ErrStarted when it runs already.
func (g *Group) Begin(ctx context.Context) (context.Context, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cancel != nil {
		return nil, ErrStarted
	}
	g.ctx, g.cancel = context.WithCancel(ctx)
	return g.ctx, nil
}

// Go runs fn in a tracked goroutine with the running service's context; Stop waits for it.
// It reports false, running nothing, when the service is not started (or stopping), so that
// work offered during shutdown is refused rather than leaked.
func (g *Group) Go(fn func(ctx context.Context)) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cancel == nil || g.ctx.Err() != nil {
		return false
	}
	ctx := g.ctx
	g.wg.Go(func() { fn(ctx) })
	return true
}

// Stop cancels the goroutines' context and waits for every goroutine Go started. The group
// may then Begin again.
func (g *Group) Stop() {
	g.mu.Lock()
	if g.cancel == nil {
		g.mu.Unlock()
		return
	}
	g.cancel() // under the lock: no Go adds to the WaitGroup once Wait may have begun
	g.mu.Unlock()
	g.wg.Wait()
	g.mu.Lock()
	g.ctx, g.cancel = nil, nil
	g.mu.Unlock()
}
