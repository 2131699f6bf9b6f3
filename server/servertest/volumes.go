package servertest

import (
	"context"
	"sync"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// VolumePool is a Pool that also keeps network volumes (pool.VolumeStorage), in memory:
// for tests of what lies above the pools (the API, the CLI, the console).
type VolumePool struct {
	*Pool
	mu    sync.Mutex
	sizes map[string]int // volume id -> GB
}

// NewVolumePool returns a pool that info describes and that keeps its data center's volumes.
func NewVolumePool(info core.PoolInfo) *VolumePool {
	return &VolumePool{Pool: NewPool(info), sizes: map[string]int{}}
}

// EnsureVolume records the volume at its size.
func (p *VolumePool) EnsureVolume(_ context.Context, v core.Volume) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sizes[v.ID] = max(p.sizes[v.ID], v.SizeGB)
	return nil
}

// DeleteVolume forgets the volume.
func (p *VolumePool) DeleteVolume(_ context.Context, v core.Volume) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.sizes, v.ID)
	return nil
}

// VolumeUsage reports 0 bytes for a volume it keeps.
func (p *VolumePool) VolumeUsage(_ context.Context, v core.Volume) (int64, error) {
	return 0, nil
}

// Size returns the GB a volume was made with, and whether the pool keeps it.
func (p *VolumePool) Size(id string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.sizes[id]
	return n, ok
}

var _ pool.VolumeStorage = (*VolumePool)(nil)
