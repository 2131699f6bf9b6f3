package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// Live returns the leases whose names begin with prefix and that have not expired or been
	// released, sorted by name: the replicas' presence leases (leader.Roster) are read so.
	Live(ctx context.Context, prefix string) ([]Lease, error)
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

// Live implements Leases.
func (m *MemoryLeases) Live(ctx context.Context, prefix string) ([]Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	var out []Lease
	for name, l := range m.leases {
		if strings.HasPrefix(name, prefix) && now.Before(l.Expires) {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b Lease) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

var _ Leases = (*MemoryLeases)(nil)
