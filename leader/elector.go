// Package leader elects one replica of many the leader, on the leases (core.Leases) of the
// store they share, and runs the leader's work for each term it wins.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/startstop"
)

// This file is the elector, moved from core/leases.go: core keeps the Leases port it uses.

// DefaultLeaseTTL is how long a leader's lease lasts without renewal. The leader renews it
// every third of that; when the leader is lost, another replica takes over within about
// 1.33 times it, always within two.
const DefaultLeaseTTL = 10 * time.Second

// Elector keeps one replica of many the leader: it takes the lease when it is free, renews it
// while it holds it, and runs Lead for each term it wins, ending the term (cancelling Lead's
// ctx and waiting for Lead to return) when a renewal fails for longer than the lease is sure
// to be its own, or when another holder has it.
type Elector struct {
	Leases core.Leases
	Name   string        // the lease's name, e.g. "scheduler"
	Holder string        // this replica's id, unique among the replicas
	TTL    time.Duration // the lease's length; 0 = DefaultLeaseTTL
	Log    *slog.Logger  // nil = slog.Default()
	// Address is where the other replicas reach this one (its peerUrl), published with the
	// lease; "" = nowhere.
	Address string
	// Lead runs while this replica leads, until ctx ends; l is its term (for Fence).
	Lead func(ctx context.Context, l core.Lease)

	run  startstop.Group // the election loop, between Start and Stop
	mu   sync.Mutex
	cur  *core.Lease // the current term; nil = not leading
	seen *core.Lease // the latest term Acquire reported, this replica's or another's; nil = none yet
}

// Leading returns the current term, when this replica leads.
func (e *Elector) Leading() (core.Lease, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur == nil {
		return core.Lease{}, false
	}
	return *e.cur, true
}

// Leader returns the latest term this replica saw: its own while it leads, else the holder's
// that its last refused Acquire reported (within about a third of the TTL of the store's
// view; a leader that has just died is still named until another takes over). ok is false
// until a term is seen, and while the last one seen was this replica's own but it no longer
// leads.
func (e *Elector) Leader() (l core.Lease, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.cur != nil:
		return *e.cur, true
	case e.seen == nil || e.seen.Holder == e.Holder:
		return core.Lease{}, false
	}
	return *e.seen, true
}

// Start elects, in a goroutine, until ctx ends or Stop; ErrStarted when it runs already.
func (e *Elector) Start(ctx context.Context) error {
	if _, err := e.run.Begin(ctx); err != nil {
		return err
	}
	e.run.Go(e.elect)
	return nil
}

// Stop ends the election: it ends the term this replica holds (Lead returns) and releases
// the lease, so that another replica takes over at once, and returns when all that is done.
func (e *Elector) Stop() { e.run.Stop() }

// elect elects until ctx ends; then it ends the term it holds and releases the lease.
func (e *Elector) elect(ctx context.Context) {
	ttl := e.TTL
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	log := e.Log
	if log == nil {
		log = slog.Default()
	}
	renew := ttl / 3
	var (
		term     core.Lease
		leading  bool
		sureTill time.Time // this replica's own clock: the lease is surely its own until then
		lead     struct {
			end  context.CancelFunc // ends the term's Lead
			done chan struct{}      // closed when Lead has returned
		}
	)
	stop := func(why string) {
		if !leading {
			return
		}
		log.Info("leadership lost", "lease", e.Name, "epoch", term.Epoch, "reason", why)
		lead.end()
		<-lead.done
		leading = false
		e.mu.Lock()
		e.cur = nil
		e.mu.Unlock()
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			stop("stopping")
			if term.Epoch != 0 {
				rctx, cancel := context.WithTimeout(context.Background(), renew)
				if err := e.Leases.Release(rctx, term); err != nil {
					log.Warn("releasing the lease", "lease", e.Name, "err", err)
				}
				cancel()
			}
			return
		case <-t.C:
		}
		started := time.Now()
		actx, cancel := context.WithTimeout(ctx, renew)
		l, err := e.Leases.Acquire(actx, e.Name, e.Holder, e.Address, ttl)
		cancel()
		if err == nil || errors.Is(err, core.ErrLeaseHeld) {
			e.mu.Lock()
			e.seen = &l
			e.mu.Unlock()
		}
		switch {
		case ctx.Err() != nil:
			// elect's end: handled at the top.
		case err == nil:
			if leading && l.Epoch != term.Epoch {
				stop("the term changed") // lapsed and taken again: a new term, begun afresh
			}
			term, sureTill = l, started.Add(ttl)
			cur := term // a copy: Leading reads it while this loop writes term
			if !leading {
				leading = true
				e.mu.Lock()
				e.cur = &cur
				e.mu.Unlock()
				log.Info("leadership gained", "lease", e.Name, "holder", e.Holder, "epoch", l.Epoch)
				var tctx context.Context
				tctx, lead.end = context.WithCancel(ctx)
				lead.done = make(chan struct{})
				go func(l core.Lease, done chan struct{}) {
					defer close(done)
					e.Lead(tctx, l)
				}(l, lead.done)
			} else {
				e.mu.Lock()
				e.cur = &cur
				e.mu.Unlock()
			}
		case errors.Is(err, core.ErrLeaseHeld):
			stop("another replica holds the lease")
		default:
			if leading && time.Now().After(sureTill.Add(-renew)) {
				stop(fmt.Sprintf("the lease could not be renewed: %v", err))
			} else if leading {
				log.Warn("renewing the lease; retrying", "lease", e.Name, "err", err)
			}
		}
		next := renew
		if leading {
			// Never sleep past the point where the lease may no longer be ours.
			next = min(next, max(time.Until(sureTill.Add(-renew)), time.Millisecond))
		}
		t.Reset(next)
	}
}
