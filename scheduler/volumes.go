package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// This file hands network volumes to workers (issue 30): which pool stores a data center's
// volumes, and, before a worker of an endpoint naming volumes starts, the volume it sees at
// core.VolumeMountPath, made ready by that pool.

// StoragePool returns the pool that stores data center dc's network volumes: override[dc]
// when the config names one (it must be in dc and implement pool.VolumeStorage), else the first
// pool in dc, in config order, that implements pool.VolumeStorage. The error says why none can.
func StoragePool(pools []pool.Pool, override map[string]string, dc string) (pool.Pool, pool.VolumeStorage, error) {
	if id, ok := override[dc]; ok {
		i := slices.IndexFunc(pools, func(p pool.Pool) bool { return p.Describe().ID == id })
		switch {
		case i < 0:
			return nil, nil, fmt.Errorf("volumeStorage names pool %q for data center %s, and there is no such pool", id, dc)
		case pools[i].Describe().DataCenter != dc:
			return nil, nil, fmt.Errorf("volumeStorage names pool %q for data center %s, but that pool is in %s", id, dc, pools[i].Describe().DataCenter)
		}
		vs, ok := pools[i].(pool.VolumeStorage)
		if !ok {
			return nil, nil, fmt.Errorf("volumeStorage names pool %q for data center %s, but its adapter (%s) cannot store network volumes", id, dc, pools[i].Describe().Adapter)
		}
		return pools[i], vs, nil
	}
	var in []string
	for _, p := range pools {
		d := p.Describe()
		if d.DataCenter != dc {
			continue
		}
		if vs, ok := p.(pool.VolumeStorage); ok {
			return p, vs, nil
		}
		in = append(in, d.ID+" ("+d.Adapter+")")
	}
	if len(in) == 0 {
		return nil, nil, fmt.Errorf("no pool is in data center %s", dc)
	}
	return nil, nil, fmt.Errorf("no pool in data center %s can store network volumes (its pools: %s)", dc, strings.Join(in, ", "))
}

// attachVolume sets spec.Volume to the endpoint's network volume in the data center of the
// pool the worker was placed on, after the pool storing that data center's volumes made it
// ready (EnsureVolume, idempotent). An error says why the worker cannot have its volume; it
// must not start then.
func (s *Scheduler) attachVolume(ctx context.Context, ep *core.Endpoint, pool pool.Pool, spec *pool.WorkerSpec) error {
	if len(ep.NetworkVolumes) == 0 || s.cfg.Volume == nil {
		return nil
	}
	dc := pool.Describe().DataCenter
	var v *core.Volume
	for _, id := range ep.NetworkVolumes {
		got, err := s.cfg.Volume(ctx, id)
		if err != nil {
			return fmt.Errorf("network volume %s cannot be read: %w", id, err)
		}
		if got.DataCenter == dc {
			v = &got
			break
		}
	}
	if v == nil {
		return fmt.Errorf("none of the endpoint's network volumes (%s) is in data center %s", strings.Join(ep.NetworkVolumes, ", "), dc)
	}
	sp, vs, err := StoragePool(s.cfg.Pools, s.cfg.VolumeStorage, dc)
	if err != nil {
		return fmt.Errorf("network volume %s cannot be mounted: %w", v.ID, err)
	}
	id := sp.Describe().ID
	if err := s.adapterCall(id, "EnsureVolume", spec.ID, func() error { return vs.EnsureVolume(ctx, *v) }); err != nil {
		return fmt.Errorf("network volume %s could not be made ready by pool %s, which stores the volumes of data center %s: %w", v.ID, id, dc, err)
	}
	spec.Volume = v
	return nil
}
