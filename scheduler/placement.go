package scheduler

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// Placer reserves pool capacity for workers without a lock: a pool's free count and its
// device bitmap change only by atomic operations, so placements on different pools never
// wait for each other and placements on one pool never block.
type Placer struct {
	slots map[string]*slot // by pool id; fixed after NewPlacer
	order []*slot          // as given
}

// slot is one pool's capacity.
type slot struct {
	pool    pool.Pool
	info    core.PoolInfo
	elastic pool.Elastic    // the pool, when its capacity changes; no bitmap then
	total   atomic.Int64    // capacity: info.GPUs, or the Elastic pool's last Capacity
	free    atomic.Int64    // GPUs (or CPU slots) not reserved; below 0 when an Elastic pool shrank
	words   []atomic.Uint64 // bit i of the bitmap: device i is reserved
}

// perWorkerMax is the most GPUs one worker may take from the slot: the description's, or for an
// Elastic pool its PerWorker (a node's GPUs), uncapped by a capacity that changes.
func (s *slot) perWorkerMax() int {
	if s.elastic != nil && s.info.PerWorker > 0 {
		return s.info.PerWorker
	}
	return s.info.GPUsPerWorkerMax()
}

// refresh brings an Elastic pool's capacity up to date: the change in total is added to free,
// so reservations made meanwhile are neither lost nor counted twice.
func (s *slot) refresh() {
	if s.elastic == nil {
		return
	}
	n := int64(s.elastic.Capacity())
	if old := s.total.Swap(n); old != n {
		s.free.Add(n - old)
	}
}

// NewPlacer returns a placer over the pools, each with its whole capacity free. Pool ids must
// be unique. Elastic pools are counted without device indices, and their capacity is read
// again at every placement.
func NewPlacer(pools []pool.Pool) (*Placer, error) {
	p := &Placer{slots: map[string]*slot{}}
	for _, pl := range pools {
		info := pl.Describe()
		if _, dup := p.slots[info.ID]; dup {
			return nil, fmt.Errorf("two pools have the id %q", info.ID)
		}
		s := &slot{pool: pl, info: info}
		if e, ok := pl.(pool.Elastic); ok {
			s.elastic = e
		} else {
			s.words = make([]atomic.Uint64, (info.GPUs+63)/64)
			s.total.Store(int64(info.GPUs))
			s.free.Store(int64(info.GPUs))
		}
		s.refresh()
		p.slots[info.ID] = s
		p.order = append(p.order, s)
	}
	return p, nil
}

// Pool returns the pool with the id.
func (p *Placer) Pool(id string) (pool.Pool, bool) {
	s, ok := p.slots[id]
	if !ok {
		return nil, false
	}
	return s.pool, true
}

// Free returns how many GPUs (or CPU slots) of the pool are not reserved; 0 for an unknown pool
// (and for an Elastic pool that shrank below what is reserved).
func (p *Placer) Free(id string) int {
	if s, ok := p.slots[id]; ok {
		s.refresh()
		return max(int(s.free.Load()), 0)
	}
	return 0
}

// Total returns the pool's capacity now: Describe's count, or an Elastic pool's Capacity; 0
// for an unknown pool.
func (p *Placer) Total(id string) int {
	if s, ok := p.slots[id]; ok {
		s.refresh()
		return int(s.total.Load())
	}
	return 0
}

// Unhealthy returns why the pool cannot start workers now, for pools that say so
// (HealthReporter); "" when it can, or the pool does not tell, or is unknown.
func (p *Placer) Unhealthy(id string) string {
	if s, ok := p.slots[id]; ok {
		if h, ok := s.pool.(pool.HealthReporter); ok {
			if err := h.Health(); err != nil {
				return err.Error()
			}
		}
	}
	return ""
}

// Reservation is capacity held for one worker until Release.
type Reservation struct {
	s        *slot
	GPUs     []int // device indices within the pool; nil on an Elastic pool
	Count    int   // GPUs (or CPU slots) held
	released atomic.Bool
}

// Pool returns the pool the capacity is in.
func (r *Reservation) Pool() pool.Pool { return r.s.pool }

// PoolID returns the id of the pool the capacity is in.
func (r *Reservation) PoolID() string { return r.s.info.ID }

// Release gives the capacity back; releasing twice is harmless.
func (r *Reservation) Release() {
	if r == nil || !r.released.CompareAndSwap(false, true) {
		return
	}
	for _, d := range r.GPUs {
		r.s.words[d/64].And(^(uint64(1) << (d % 64)))
	}
	r.s.free.Add(int64(r.Count))
}

// Want is what a worker needs from a pool.
type Want struct {
	Pools        []string // in preference order
	Count        int      // GPUs per worker; 0 means 1
	DataCenters  []string // allowed data centers; empty = any
	CUDAVersions []string // allowed CUDA versions, exact match; empty = any
}

// WantOf is what an endpoint's workers need. Network volumes pin their data centers:
// volumeDC returns a volume's data center.
func WantOf(ep *core.Endpoint, volumeDC func(id string) (string, bool)) Want {
	w := Want{Pools: ep.GPU.Pools, Count: max(ep.GPU.Count, 1), DataCenters: ep.DataCenterIDs,
		CUDAVersions: ep.AllowedCudaVersions}
	var pinned []string
	for _, v := range ep.NetworkVolumes {
		if dc, ok := volumeDC(v); ok && !slices.Contains(pinned, dc) {
			pinned = append(pinned, dc)
		}
	}
	if len(pinned) > 0 {
		if len(w.DataCenters) > 0 {
			pinned = slices.DeleteFunc(pinned, func(dc string) bool { return !slices.Contains(w.DataCenters, dc) })
			if len(pinned) == 0 {
				pinned = []string{"(none: the network volumes are outside dataCenterIds)"}
			}
		}
		w.DataCenters = pinned
	}
	return w
}

// NoRoomError says why no pool could take a worker, pool by pool. Its message is built only
// when asked for: under load the scheduler meets many more of them than it reports.
type NoRoomError struct {
	want   Want
	misses []poolMiss
}

// poolMiss is why one pool could not take the worker.
type poolMiss struct {
	pool  string
	why   missKind
	info  *core.PoolInfo // nil for a pool this server does not have
	inUse int            // missFull: GPUs reserved when it was tried
	total int            // missFull: the pool's capacity then
}

type missKind uint8

const (
	missUnknown missKind = iota
	missDataCenter
	missCUDA
	missTooMany
	missFull
)

func (e *NoRoomError) Error() string {
	if len(e.misses) == 0 {
		return "no pool has room: the endpoint lists no pool"
	}
	var b strings.Builder
	b.WriteString("no pool has room: ")
	for i, m := range e.misses {
		if i > 0 {
			b.WriteString("; ")
		}
		switch m.why {
		case missUnknown:
			fmt.Fprintf(&b, "%s: no such pool on this server", m.pool)
		case missDataCenter:
			fmt.Fprintf(&b, "%s: in data center %q, not an allowed one", m.pool, m.info.DataCenter)
		case missCUDA:
			fmt.Fprintf(&b, "%s: runs CUDA %s, none of the allowed %s", m.pool,
				strings.Join(m.info.CUDAVersions, ", "), strings.Join(e.want.CUDAVersions, ", "))
		case missTooMany:
			fmt.Fprintf(&b, "%s: a worker may take at most %d GPUs here, not %d", m.pool, m.info.GPUsPerWorkerMax(), max(e.want.Count, 1))
		case missFull:
			fmt.Fprintf(&b, "%s: %d of %d in use", m.pool, m.inUse, m.total)
		}
	}
	return b.String()
}

// same says whether e and o would say the same thing, without building either message.
func (e *NoRoomError) same(o *NoRoomError) bool {
	return e != nil && o != nil && slices.Equal(e.misses, o.misses) && e.want.Count == o.want.Count &&
		slices.Equal(e.want.CUDAVersions, o.want.CUDAVersions)
}

// Place reserves capacity for one worker on the first pool in w.Pools that is in an allowed
// data center, runs an allowed CUDA version and has w.Count GPUs free. It returns a
// *NoRoomError naming each pool's reason when none has.
func (p *Placer) Place(w Want) (*Reservation, error) {
	count := max(w.Count, 1)
	misses := make([]poolMiss, 0, len(w.Pools))
	for _, id := range w.Pools {
		s, ok := p.slots[id]
		m := poolMiss{pool: id}
		switch {
		case !ok:
			m.why = missUnknown
		case len(w.DataCenters) > 0 && !slices.Contains(w.DataCenters, s.info.DataCenter):
			m.why, m.info = missDataCenter, &s.info
		case len(w.CUDAVersions) > 0 && !slices.ContainsFunc(w.CUDAVersions, func(v string) bool { return slices.Contains(s.info.CUDAVersions, v) }):
			m.why, m.info = missCUDA, &s.info
		case count > s.perWorkerMax():
			m.why, m.info = missTooMany, &s.info
		default:
			if r := s.reserve(count); r != nil {
				return r, nil
			}
			m.why, m.info, m.inUse, m.total = missFull, &s.info, int(s.total.Load()-s.free.Load()), int(s.total.Load())
		}
		misses = append(misses, m)
	}
	return nil, &NoRoomError{want: w, misses: misses}
}

// reserve takes n units of the slot's capacity, or nothing. The free count is the gate: once
// it is decremented, n clear bits exist in the bitmap (bits are cleared before the count is
// given back), so the claim loop always finds them.
func (s *slot) reserve(n int) *Reservation {
	s.refresh()
	for {
		f := s.free.Load()
		if f < int64(n) {
			return nil
		}
		if s.free.CompareAndSwap(f, f-int64(n)) {
			break
		}
	}
	if s.elastic != nil { // the nodes pick the devices
		return &Reservation{s: s, Count: n}
	}
	r := &Reservation{s: s, GPUs: make([]int, 0, n), Count: n}
	for len(r.GPUs) < n {
		for wi := range s.words {
			for len(r.GPUs) < n {
				word := &s.words[wi]
				avail := ^word.Load() & s.mask(wi)
				if avail == 0 {
					break
				}
				bit := uint64(1) << bits.TrailingZeros64(avail)
				if word.Or(bit)&bit == 0 { // it was clear: ours now
					r.GPUs = append(r.GPUs, wi*64+bits.TrailingZeros64(bit))
				}
			}
		}
	}
	return r
}

// adopt takes n units of an Elastic slot's capacity for a worker that already runs, even
// beyond what is free (the pool counts its running workers as free until one holds them).
func (s *slot) adopt(n int) *Reservation {
	s.refresh()
	s.free.Add(-int64(n))
	return &Reservation{s: s, Count: n}
}

// mask has a bit set for each device of word wi that exists.
func (s *slot) mask(wi int) uint64 {
	if n := s.info.GPUs - wi*64; n < 64 {
		return uint64(1)<<n - 1
	}
	return ^uint64(0)
}
