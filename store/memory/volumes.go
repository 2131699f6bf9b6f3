package memory

import (
	"context"

	"github.com/gantryhq/gantry/core"
)

// This file keeps users' network volumes (core.VolumeStore), as endpoints are kept.

// PutVolume stores a network volume.
func (s *Store) PutVolume(ctx context.Context, v core.Volume) error {
	return put(ctx, s, s.volumes, v.ID, v.Owner, v.CreatedAt, v)
}

// GetVolume reads a network volume.
func (s *Store) GetVolume(ctx context.Context, id string) (core.Volume, error) {
	return get[core.Volume](ctx, s, s.volumes, id)
}

// ListVolumes lists an owner's network volumes in creation order.
func (s *Store) ListVolumes(ctx context.Context, owner, cursor string, limit int) ([]core.Volume, string, error) {
	return list[core.Volume](ctx, s, s.volumes, owner, cursor, limit)
}

// DeleteVolume removes a network volume.
func (s *Store) DeleteVolume(ctx context.Context, id string) error {
	return del(ctx, s, s.volumes, id)
}

var _ core.VolumeStore = (*Store)(nil)
