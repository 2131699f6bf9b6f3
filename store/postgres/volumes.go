package postgres

import (
	"context"

	"github.com/gantryhq/gantry/core"
)

// This file keeps users' network volumes (core.VolumeStore) in gantry_volumes, as templates
// are kept.

var volumeTable = newRecordTable("gantry_volumes", "network volume", "")

// PutVolume stores a network volume.
func (db *DB) PutVolume(ctx context.Context, v core.Volume) error {
	return putRecord(ctx, db, volumeTable, v.ID, v.Owner, v.CreatedAt, v)
}

// GetVolume reads a network volume.
func (db *DB) GetVolume(ctx context.Context, id string) (core.Volume, error) {
	return getRecord[core.Volume](ctx, db, volumeTable, id)
}

// ListVolumes lists an owner's network volumes in creation order.
func (db *DB) ListVolumes(ctx context.Context, owner, cursor string, limit int) ([]core.Volume, string, error) {
	return listRecords[core.Volume](ctx, db, volumeTable, owner, cursor, limit)
}

// DeleteVolume removes a network volume.
func (db *DB) DeleteVolume(ctx context.Context, id string) error {
	return deleteRecord(ctx, db, volumeTable, id)
}

var _ core.VolumeStore = (*DB)(nil)
