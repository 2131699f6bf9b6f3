package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Lease is a term of leadership: whoever holds the named lease until Expires is the one
// leader of the replicas sharing a store. Epoch counts the terms: it grows each time the
// lease changes hands (or is taken again after it lapsed), and fences writes (Leases.Fence)
// so that a leader deposed while it was paused or cut off cannot write over its successor.
type Lease struct {
	Name    string
	Holder  string
	Epoch   int64
	Expires time.Time // by the store's clock
	// Address is where the other replicas reach the holder (its peerUrl, e.g.
	// http://10.0.0.5:8080); "" = it published none.
	Address string
}

// Lease errors.
var (
	// ErrLeaseHeld means another holder has the lease and it has not expired.
	ErrLeaseHeld = errors.New("the lease is held by another replica")
	// ErrDeposed means a write was fenced off: its lease is no longer the current one.
	ErrDeposed = errors.New("deposed: the lease has passed to another term")
)

// Leases elects leaders: a lease row per name, with an epoch, in the store replicas share. It
// is never a session lock: a lease works through a transaction-pooling proxy, and its epoch
// can fence. A call whose ctx is done returns an error that wraps ctx.Err() and changes
// nothing.
type Leases interface {
	// Acquire takes the lease name for holder for ttl when it is free or has expired (a new
	// term: the epoch grows), or renews it when holder holds it (the same term, a later
	// Expires); either way it publishes address, where the others reach holder, with it.
	// When another holder has the lease, it returns that holder's lease (its Address among
	// it) with ErrLeaseHeld.
	Acquire(ctx context.Context, name, holder, address string, ttl time.Duration) (Lease, error)
	// Release ends l's term now, so that another replica takes over without waiting out the
	// ttl. Releasing a lease that has passed on changes nothing.
	Release(ctx context.Context, l Lease) error
	// Fence runs write while l is the current term, and keeps it current until write
	// returns: no other holder can take the lease meanwhile. When l has expired or passed on,
	// write does not run and Fence returns ErrDeposed. A store that can join write's own
	// writes to the check (PostgreSQL: one transaction) passes them in write's ctx.
	Fence(ctx context.Context, l Lease, write func(ctx context.Context) error) error
}

// MemoryLeases is Leases in this process's memory: the embedded default, where one server is
// the only replica and always the leader. It honours terms and fencing all the same, so that
// code written against Leases behaves alike on both.
type MemoryLeases struct {
	Clock Clock // nil = the system clock

	mu     sync.Mutex
	leases map[string]Lease
}

func (m *MemoryLeases) now() time.Time {
	if m.Clock == nil {
		return time.Now()
	}
	return m.Clock.Now()
}

// Acquire implements Leases.
func (m *MemoryLeases) Acquire(ctx context.Context, name, holder, address string, ttl time.Duration) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	if name == "" || holder == "" || ttl <= 0 {
		return Lease{}, fmt.Errorf("acquiring a lease needs a name, a holder and a positive ttl (got %q, %q, %v)", name, holder, ttl)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases == nil {
		m.leases = map[string]Lease{}
	}
	now := m.now()
	l, ok := m.leases[name]
	live := ok && now.Before(l.Expires)
	switch {
	case live && l.Holder != holder:
		return l, ErrLeaseHeld
	case !live || l.Holder != holder:
		l.Epoch++ // a new term
	}
	l.Name, l.Holder, l.Address, l.Expires = name, holder, address, now.Add(ttl)
	m.leases[name] = l
	return l, nil
}

// Release implements Leases.
func (m *MemoryLeases) Release(ctx context.Context, l Lease) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.leases[l.Name]; ok && cur.Holder == l.Holder && cur.Epoch == l.Epoch {
		cur.Expires = m.now()
		m.leases[l.Name] = cur
	}
	return nil
}

// Fence implements Leases: write runs under the lock that Acquire takes.
func (m *MemoryLeases) Fence(ctx context.Context, l Lease, write func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.leases[l.Name]
	if !ok || cur.Holder != l.Holder || cur.Epoch != l.Epoch || !m.now().Before(cur.Expires) {
		return ErrDeposed
	}
	return write(ctx)
}

var _ Leases = (*MemoryLeases)(nil)

// DefaultLeaseTTL is how long a leader's lease lasts without renewal. The leader renews it
// every third of that; when the leader is lost, another replica takes over within about
// 1.33 times it, always within two.
const DefaultLeaseTTL = 10 * time.Second

// Elector keeps one replica of many the leader: it takes the lease when it is free, renews it
// while it holds it, and runs Lead for each term it wins, ending the term (cancelling Lead's
// ctx and waiting for Lead to return) when a renewal fails for longer than the lease is sure
// to be its own, or when another holder has it.
type Elector struct {
	Leases Leases
	Name   string        // the lease's name, e.g. "scheduler"
	Holder string        // this replica's id, unique among the replicas
	TTL    time.Duration // the lease's length; 0 = DefaultLeaseTTL
	Log    *slog.Logger  // nil = slog.Default()
	// Address is where the other replicas reach this one (its peerUrl), published with the
	// lease; "" = nowhere.
	Address string
	// Lead runs while this replica leads, until ctx ends; l is its term (for Fence).
	Lead func(ctx context.Context, l Lease)

	mu   sync.Mutex
	cur  *Lease // the current term; nil = not leading
	seen *Lease // the latest term Acquire reported, this replica's or another's; nil = none yet
}

// Leading returns the current term, when this replica leads.
func (e *Elector) Leading() (Lease, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur == nil {
		return Lease{}, false
	}
	return *e.cur, true
}

// Leader returns the latest term this replica saw: its own while it leads, else the holder's
// that its last refused Acquire reported (within about a third of the TTL of the store's
// view; a leader that has just died is still named until another takes over). ok is false
// until a term is seen, and while the last one seen was this replica's own but it no longer
// leads.
func (e *Elector) Leader() (l Lease, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.cur != nil:
		return *e.cur, true
	case e.seen == nil || e.seen.Holder == e.Holder:
		return Lease{}, false
	}
	return *e.seen, true
}

// Run elects until ctx ends; then it ends the term it holds and releases the lease, so that
// another replica takes over at once.
func (e *Elector) Run(ctx context.Context) {
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
		term     Lease
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
		if err == nil || errors.Is(err, ErrLeaseHeld) {
			e.mu.Lock()
			e.seen = &l
			e.mu.Unlock()
		}
		switch {
		case ctx.Err() != nil:
			// Run's end: handled at the top.
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
				go func(l Lease, done chan struct{}) {
					defer close(done)
					e.Lead(tctx, l)
				}(l, lead.done)
			} else {
				e.mu.Lock()
				e.cur = &cur
				e.mu.Unlock()
			}
		case errors.Is(err, ErrLeaseHeld):
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
