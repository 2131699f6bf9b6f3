package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// RunVolumeStore runs the conformance suite of core.VolumeStore: the record suite endpoints
// and templates pass (round trips, overwrites, listing order and cursors, owners kept apart,
// a done context, durability), on network volumes.
func RunVolumeStore(t *testing.T, open Opener[core.VolumeStore]) {
	t.Helper()
	run(t, suite[core.Volume]{
		kind: "Volume",
		open: func(t *testing.T) (store[core.Volume], func() store[core.Volume]) {
			s, reopen := open(t)
			return volumeStore{s}, adaptReopen(reopen, func(s core.VolumeStore) store[core.Volume] { return volumeStore{s} })
		},
		sample: sampleVolume,
		id:     func(v core.Volume) string { return v.ID },
		owner:  func(v core.Volume) string { return v.Owner },
		name:   func(v core.Volume) string { return v.Name },
		update: func(v core.Volume, name string, _ time.Time) core.Volume {
			v.Name = name
			v.SizeGB *= 2
			return v
		},
		mutate: func(v *core.Volume) {}, // a volume holds no slice, map or pointer
		same: func(got, want core.Volume) bool {
			if !got.CreatedAt.Equal(want.CreatedAt) {
				return false
			}
			got.CreatedAt = want.CreatedAt
			return got == want
		},
	})
}

func sampleVolume(id, owner string, created time.Time) core.Volume {
	return core.Volume{ID: id, Owner: owner, Name: "volume " + id, SizeGB: 50, DataCenter: "EU-RO-1",
		Type: core.VolumeHighPerformance, CreatedAt: created}
}

type volumeStore struct{ s core.VolumeStore }

func (a volumeStore) Put(ctx context.Context, v core.Volume) error { return a.s.PutVolume(ctx, v) }
func (a volumeStore) Get(ctx context.Context, id string) (core.Volume, error) {
	return a.s.GetVolume(ctx, id)
}
func (a volumeStore) List(ctx context.Context, owner, cursor string, limit int) ([]core.Volume, string, error) {
	return a.s.ListVolumes(ctx, owner, cursor, limit)
}
func (a volumeStore) Delete(ctx context.Context, id string) error { return a.s.DeleteVolume(ctx, id) }
