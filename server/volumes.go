package server

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/scheduler"
)

// This file wires network volumes (issue 30): the store that keeps users' volumes, and the
// pools that keep their data (core.VolumeBackend over scheduler.StoragePool).

// validateVolumeStorage checks volumeStorage against the configured pools: each names a pool
// of its data center. Whether the pool's adapter can store volumes is checked once the pools
// are built (checkVolumeStorage).
func (c *Config) validateVolumeStorage() error {
	for _, dc := range volumeStorageDCs(c.VolumeStorage) {
		id := c.VolumeStorage[dc]
		if dc == "" || id == "" {
			return fmt.Errorf("volumeStorage: %q: %q: both the data center and the pool id are required", dc, id)
		}
		if len(c.Pools) == 0 {
			continue // the discovered pool: checked once it is built
		}
		i := slices.IndexFunc(c.Pools, func(p PoolConfig) bool { return p.ID == id })
		switch {
		case i < 0:
			return fmt.Errorf("volumeStorage[%s]: no pool %q", dc, id)
		case c.Pools[i].DataCenter != dc:
			return fmt.Errorf("volumeStorage[%s]: pool %q is in data center %q", dc, id, c.Pools[i].DataCenter)
		}
	}
	return nil
}

func volumeStorageDCs(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkVolumeStorage checks that each pool volumeStorage names can store volumes.
func checkVolumeStorage(pools []pool.Pool, override map[string]string) error {
	for _, dc := range volumeStorageDCs(override) {
		if _, _, err := scheduler.StoragePool(pools, override, dc); err != nil {
			return err
		}
	}
	return nil
}

// volumeBackend keeps volumes' data in the pools: each data center's in the pool that
// scheduler.StoragePool picks.
type volumeBackend struct {
	pools    []pool.Pool
	override map[string]string
}

func (b volumeBackend) storage(dc string) (string, pool.VolumeStorage, error) {
	p, vs, err := scheduler.StoragePool(b.pools, b.override, dc)
	if err != nil {
		return "", nil, err
	}
	return p.Describe().ID, vs, nil
}

func (b volumeBackend) StoragePool(dc string) (string, error) {
	id, _, err := b.storage(dc)
	return id, err
}

func (b volumeBackend) EnsureVolume(ctx context.Context, v core.Volume) error {
	_, vs, err := b.storage(v.DataCenter)
	if err != nil {
		return err
	}
	return vs.EnsureVolume(ctx, v)
}

func (b volumeBackend) DeleteVolume(ctx context.Context, v core.Volume) error {
	_, vs, err := b.storage(v.DataCenter)
	if err != nil {
		return err
	}
	return vs.DeleteVolume(ctx, v)
}

func (b volumeBackend) VolumeUsage(ctx context.Context, v core.Volume) (int64, error) {
	_, vs, err := b.storage(v.DataCenter)
	if err != nil {
		return -1, err
	}
	return vs.VolumeUsage(ctx, v)
}

func (b volumeBackend) VolumeWarning(poolID string) string {
	for _, p := range b.pools {
		if p.Describe().ID != poolID {
			continue
		}
		if w, ok := p.(pool.VolumeWarner); ok {
			return w.VolumeWarning()
		}
	}
	return ""
}

// volumeDCs answers the scheduler's question of a volume's data center (its workers are placed
// there) from volume, remembering each answer: a volume never changes data center, and ids
// are never reused, so a placement needs no store read after the first.
func volumeDCs(volume func(ctx context.Context, id string) (core.Volume, error)) func(id string) (string, bool) {
	var known sync.Map // volume id -> data center
	return func(id string) (string, bool) {
		if dc, ok := known.Load(id); ok {
			return dc.(string), true
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		v, err := volume(ctx, id)
		if err != nil {
			return "", false
		}
		known.Store(id, v.DataCenter)
		return v.DataCenter, true
	}
}
