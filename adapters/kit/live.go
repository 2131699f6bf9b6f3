package kit

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/gantryhq/gantry/pool"
)

// Devices is a pool's account of its device indices (GPUs, or CPU slots): which ones live
// workers hold. Adapters use it to refuse a spec the scheduler's reservations should never
// produce. It is not safe for concurrent use: the adapter's own lock guards it.
type Devices []bool

// NewDevices returns the account of a pool of n devices, all free.
func NewDevices(n int) Devices { return make(Devices, n) }

// Hold takes gpus for a worker, or takes nothing and says why not: more than the pool has,
// out of range, asked twice or in use (errors wrap pool.ErrNoCapacity).
func (d Devices) Hold(gpus []int) error {
	if len(gpus) > len(d) {
		return fmt.Errorf("%d devices asked of a pool of %d: %w", len(gpus), len(d), pool.ErrNoCapacity)
	}
	for i, g := range gpus {
		switch {
		case g < 0 || g >= len(d):
			return fmt.Errorf("device %d is out of range (the pool has %d): %w", g, len(d), pool.ErrNoCapacity)
		case slices.Contains(gpus[:i], g):
			return fmt.Errorf("device %d asked twice: %w", g, pool.ErrNoCapacity)
		case d[g]:
			return fmt.Errorf("device %d is in use: %w", g, pool.ErrNoCapacity)
		}
	}
	for _, g := range gpus {
		d[g] = true
	}
	return nil
}

// Free gives back devices Hold took.
func (d Devices) Free(gpus []int) {
	for _, g := range gpus {
		d[g] = false
	}
}

// Live is an adapter's registry of its live workers (from Start until their exit) and of the
// devices they hold. It is safe for concurrent use.
type Live[W any] struct {
	mu      sync.Mutex
	workers map[string]W
	held    Devices
}

// NewLive returns the registry of a pool of n devices, with no worker.
func NewLive[W any](n int) *Live[W] {
	return &Live[W]{workers: map[string]W{}, held: NewDevices(n)}
}

// Add registers worker id, holding gpus; or registers nothing and says why not: the id is
// live already, or the devices cannot be held (see Devices.Hold).
func (l *Live[W]) Add(id string, gpus []int, w W) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.workers[id]; dup {
		return errors.New("the pool already runs a worker with this id")
	}
	if err := l.held.Hold(gpus); err != nil {
		return err
	}
	l.workers[id] = w
	return nil
}

// Remove forgets worker id and frees the gpus Add held for it; it is called once for each
// worker Add registered.
func (l *Live[W]) Remove(id string, gpus []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held.Free(gpus)
	delete(l.workers, id)
}

// Get returns a live worker.
func (l *Live[W]) Get(id string) (W, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.workers[id]
	return w, ok
}

// All returns the live workers, in no order.
func (l *Live[W]) All() []W {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Collect(maps.Values(l.workers))
}
