package runpod

import (
	"context"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/adapters/runpod/rpapi"
	"github.com/gantryhq/gantry/adapters/runpod/runpodfake"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// TestNetworkVolumes: EnsureVolume makes a RunPod network volume named after the Gantry
// volume in its data center, grows it and never shrinks it; a second pool (a restarted
// Gantry) finds it by name; a worker's pod mounts it at /runpod-volume and runs in its data
// center; DeleteVolume removes it, and a second delete is no error.
func TestNetworkVolumes(t *testing.T) {
	t.Parallel()
	g := gpu4090
	g.DataCenters = []string{"US-TX-3", "EU-RO-1"}
	f := setup(t, Config{DataCenters: []string{"US-TX-3", "EU-RO-1"}}, runpodfake.Config{GPUs: []runpodfake.GPU{g}})
	ctx := context.Background()
	v := core.Volume{ID: "vol1", Name: "weights", SizeGB: 20, DataCenter: "EU-RO-1"}
	if err := f.pool.EnsureVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	vols := f.cloud.Volumes()
	if len(vols) != 1 || vols[0].Name != "gantry-gantry-vol-vol1" || vols[0].Size != 20 || vols[0].DataCenter != "EU-RO-1" {
		t.Fatalf("volumes %+v; want one of 20 GB in EU-RO-1 named after vol1", vols)
	}
	v.SizeGB = 50
	if err := f.pool.EnsureVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	v.SizeGB = 30 // Gantry never asks for less, but a stale replica might: nothing shrinks
	again := newPool(t, f.cloud, Config{Pool: core.PoolInfo{ID: f.pool.desc.ID + "-2"}, DataCenters: []string{"US-TX-3", "EU-RO-1"}})
	if err := again.EnsureVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	if vols := f.cloud.Volumes(); len(vols) != 1 || vols[0].Size != 50 {
		t.Fatalf("volumes %+v; want the one volume, grown to 50 GB", vols)
	}
	if got := f.cloud.Requests("POST /v2/network-volumes"); got != 1 {
		t.Errorf("volume creates = %d; want 1 (the second pool found it by name)", got)
	}
	if n, err := f.pool.VolumeUsage(ctx, v); n != -1 || err != nil {
		t.Errorf("VolumeUsage = %d, %v; want -1 (RunPod does not say)", n, err)
	}

	lists := f.cloud.Requests("GET /v2/network-volumes")
	spec := f.spec()
	spec.Volume = &v
	f.start(spec)
	if got := f.cloud.Requests("GET /v2/network-volumes"); got != lists {
		t.Errorf("a start listed the volumes %d times; want none (EnsureVolume noted the id)", got-lists)
	}
	pod, ok := f.cloud.podOf(spec.ID)
	if !ok {
		t.Fatal("no pod for the worker")
	}
	if pod.NetworkVolume != vols[0].ID || pod.VolumePath != core.VolumeMountPath || pod.DataCenter != "EU-RO-1" {
		t.Errorf("pod mounts %q at %q in %s; want RunPod volume %s at %s in EU-RO-1", pod.NetworkVolume, pod.VolumePath,
			pod.DataCenter, vols[0].ID, core.VolumeMountPath)
	}
	if err := f.pool.DeleteVolume(ctx, v); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("DeleteVolume while a pod mounts it = %v; want RunPod's 409", err)
	}
	f.stop(spec.ID)
	if err := f.pool.DeleteVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	if vols := f.cloud.Volumes(); len(vols) != 0 {
		t.Errorf("volumes %+v after DeleteVolume; want none", vols)
	}
	if err := f.pool.DeleteVolume(ctx, v); err != nil {
		t.Errorf("DeleteVolume of a deleted volume = %v; want nil", err)
	}

	// A worker whose volume is gone never starts: Start says why.
	spec = f.spec()
	spec.Volume = &v
	if err := f.pool.Start(ctx, spec); err == nil || !strings.Contains(err.Error(), "no network volume") {
		t.Errorf("Start with a deleted volume = %v; want an error naming the missing volume", err)
	}

	// One deleted behind Gantry's back: the create is refused with RunPod's reason, and the
	// next start looks the volume up again.
	if err := f.pool.EnsureVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	vols = f.cloud.Volumes()
	if _, err := f.cloud.client(t).DeleteNetworkVolume(ctx, rpapi.DeleteNetworkVolumeParams{ID: vols[0].ID}); err != nil {
		t.Fatal(err)
	}
	spec = f.spec()
	spec.Volume = &v
	if err := f.pool.Start(ctx, spec); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("Start with a volume deleted at RunPod = %v; want RunPod's 400 naming it", err)
	}
	spec = f.spec()
	spec.Volume = &v
	if err := f.pool.Start(ctx, spec); err == nil || !strings.Contains(err.Error(), "no network volume") {
		t.Errorf("the next Start = %v; want the volume looked up again and found missing", err)
	}
}

// TestVolumeDataCenter: a volume in the pool's catalog data center is kept in the pool's
// first RunPod data center; one in a data center the pool does not place pods in, or a pool
// with no RunPod data center, is an error.
func TestVolumeDataCenter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		pool    core.PoolInfo
		dcs     []string
		volume  string
		want    string
		wantErr string
	}{
		{"its own", core.PoolInfo{}, []string{"US-TX-3", "EU-RO-1"}, "EU-RO-1", "EU-RO-1", ""},
		{"the pool's catalog data center", core.PoolInfo{DataCenter: "tx"}, []string{"US-TX-3"}, "tx", "US-TX-3", ""},
		{"any of RunPod's", core.PoolInfo{}, nil, "EU-RO-1", "EU-RO-1", ""},
		{"not the pool's", core.PoolInfo{}, []string{"US-TX-3"}, "EU-RO-1", "", "not one of"},
		{"no RunPod data center", core.PoolInfo{}, nil, "RUNPOD", "", "set the pool's dataCenters"},
	} {
		d := tc.pool
		d.ID = "rp"
		if d.DataCenter == "" {
			d.DataCenter = "RUNPOD"
			if len(tc.dcs) > 0 {
				d.DataCenter = tc.dcs[0]
			}
		}
		p := &Pool{desc: d, cfg: Config{DataCenters: tc.dcs}}
		got, err := p.volumeDataCenter(core.Volume{ID: "v", DataCenter: tc.volume})
		if got != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: volumeDataCenter = %q, %v; want %q, %q", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

var _ pool.VolumeStorage = (*Pool)(nil)
