package pebble

import (
	"context"
	"time"

	"github.com/gantryhq/gantry/core"
)

// This file keeps users' network volumes (core.VolumeStore): a primary key and a per-owner
// index in creation order, as endpoints and templates are kept.

var volumes = family{"nv/", "nvo/"}

// PutVolume stores a network volume.
func (s *Store) PutVolume(ctx context.Context, v core.Volume) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.put(volumes, v.ID, v.Owner, v.CreatedAt, v, func() (string, time.Time, error) {
		old, err := get[core.Volume](s, volumes, v.ID)
		return old.Owner, old.CreatedAt, err
	})
}

// GetVolume reads a network volume.
func (s *Store) GetVolume(ctx context.Context, id string) (core.Volume, error) {
	if err := ctx.Err(); err != nil {
		return core.Volume{}, err
	}
	return get[core.Volume](s, volumes, id)
}

// ListVolumes lists an owner's network volumes in creation order.
func (s *Store) ListVolumes(ctx context.Context, owner, cursor string, limit int) ([]core.Volume, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	return list[core.Volume](s, volumes, owner, cursor, limit)
}

// DeleteVolume removes a network volume.
func (s *Store) DeleteVolume(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.del(volumes, id, func() (string, time.Time, error) {
		v, err := get[core.Volume](s, volumes, id)
		return v.Owner, v.CreatedAt, err
	})
}

var _ core.VolumeStore = (*Store)(nil)
