package runpodfake_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/gantryhq/gantry/adapters/runpod/rpapi"
	"github.com/gantryhq/gantry/adapters/runpod/runpodfake"
)

// TestNetworkVolumes: create, list, get, grow, rename and delete, with RunPod's rules (size
// 10..4096 GB, a data center the fake offers, no shrink, 404 for an unknown id).
func TestNetworkVolumes(t *testing.T) {
	t.Parallel()
	g := gpu4090
	g.DataCenters = []string{"EU-RO-1", "US-TX-3"}
	f, c, _ := setup(t, runpodfake.Config{GPUs: []runpodfake.GPU{g}}, key)
	ctx := context.Background()

	for _, tc := range []struct {
		name   string
		req    rpapi.CreateNetworkVolume
		status int
		detail string
	}{
		{"too small", rpapi.CreateNetworkVolume{Name: "v", Size: 9, DataCenter: "EU-RO-1"}, http.StatusUnprocessableEntity, "size"},
		{"too big", rpapi.CreateNetworkVolume{Name: "v", Size: 4097, DataCenter: "EU-RO-1"}, http.StatusUnprocessableEntity, "size"},
		{"unknown data center", rpapi.CreateNetworkVolume{Name: "v", Size: 10, DataCenter: "MARS-1"}, http.StatusBadRequest, `dataCenter "MARS-1"`},
	} {
		res, err := c.CreateNetworkVolume(ctx, &tc.req)
		if err != nil {
			t.Fatal(err)
		}
		wantProblem(t, "CreateNetworkVolume "+tc.name, res, tc.status, tc.detail)
	}

	res, err := c.CreateNetworkVolume(ctx, &rpapi.CreateNetworkVolume{Name: "weights", Size: 50, DataCenter: "EU-RO-1"})
	if err != nil {
		t.Fatal(err)
	}
	created, ok := res.(*rpapi.NetworkVolumeHeaders)
	if !ok || created.Response.ID == "" || created.Response.Size != 50 || created.Response.DataCenter != "EU-RO-1" ||
		created.Response.Type != rpapi.VolumeTypeSTANDARD {
		t.Fatalf("CreateNetworkVolume = %#v; want 50 GB in EU-RO-1, STANDARD", res)
	}
	id := created.Response.ID

	list, err := c.ListNetworkVolumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := list.(*rpapi.NetworkVolumeListHeaders); !ok || len(l.Response.NetworkVolumes) != 1 || l.Response.NetworkVolumes[0].Name != "weights" {
		t.Fatalf("ListNetworkVolumes = %#v; want the one volume", list)
	}

	upd := func(req rpapi.UpdateNetworkVolume) rpapi.UpdateNetworkVolumeRes {
		t.Helper()
		res, err := c.UpdateNetworkVolume(ctx, &req, rpapi.UpdateNetworkVolumeParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	wantProblem(t, "a shrink", upd(rpapi.UpdateNetworkVolume{Size: rpapi.NewOptInt(40)}), http.StatusBadRequest, "cannot shrink")
	wantProblem(t, "an empty update", upd(rpapi.UpdateNetworkVolume{}), http.StatusUnprocessableEntity, "")
	if got, ok := upd(rpapi.UpdateNetworkVolume{Size: rpapi.NewOptInt(120), Name: rpapi.NewOptString("llama")}).(*rpapi.NetworkVolumeHeaders); !ok ||
		got.Response.Size != 120 || got.Response.Name != "llama" {
		t.Fatalf("a grow and rename = %#v; want 120 GB named llama", got)
	}
	get, err := c.GetNetworkVolume(ctx, rpapi.GetNetworkVolumeParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := get.(*rpapi.NetworkVolumeHeaders); !ok || v.Response.Size != 120 || v.Response.DataCenter != "EU-RO-1" {
		t.Fatalf("GetNetworkVolume = %#v; want 120 GB in EU-RO-1", get)
	}
	if got := f.Requests("PATCH /v2/network-volumes/{id}"); got != 3 {
		t.Errorf("Requests(PATCH /v2/network-volumes/{id}) = %d; want 3", got)
	}

	del, err := c.DeleteNetworkVolume(ctx, rpapi.DeleteNetworkVolumeParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := del.(*rpapi.DeleteNetworkVolumeNoContent); !ok {
		t.Fatalf("DeleteNetworkVolume = %#v; want 204", del)
	}
	if vs := f.Volumes(); len(vs) != 0 {
		t.Errorf("Volumes() = %+v after the delete; want none", vs)
	}
	get, err = c.GetNetworkVolume(ctx, rpapi.GetNetworkVolumeParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, "GetNetworkVolume after the delete", get, http.StatusNotFound, "not found")
}

// TestPodsMountANetworkVolume: a pod naming a network volume is placed in the volume's data
// center and records the mount; an unknown volume, or a data center the create excludes,
// answers 400; a volume a pod mounts cannot be deleted.
func TestPodsMountANetworkVolume(t *testing.T) {
	t.Parallel()
	g := gpu4090
	g.DataCenters = []string{"US-TX-3", "EU-RO-1"}
	f, c, _ := setup(t, runpodfake.Config{GPUs: []runpodfake.GPU{g}}, key)
	ctx := context.Background()
	res, err := c.CreateNetworkVolume(ctx, &rpapi.CreateNetworkVolume{Name: "weights", Size: 10, DataCenter: "EU-RO-1"})
	if err != nil {
		t.Fatal(err)
	}
	vol := res.(*rpapi.NetworkVolumeHeaders).Response.ID
	mount := func(id string) rpapi.OptMounts {
		return rpapi.NewOptMounts(rpapi.Mounts{Network: []rpapi.NetworkMount{{VolumeId: id, Path: "/runpod-volume"}}})
	}

	req := gpuPod("unknown")
	req.Mounts = mount("nope")
	wantProblem(t, "a pod mounting an unknown volume", create(t, c, req), http.StatusBadRequest, `network volume "nope" not found`)
	req = gpuPod("elsewhere")
	req.Mounts, req.DataCenterIds = mount(vol), []string{"US-TX-3"}
	wantProblem(t, "a pod kept out of the volume's data center", create(t, c, req), http.StatusBadRequest, "EU-RO-1")

	req = gpuPod("mounts")
	req.Mounts = mount(vol)
	p, ok := create(t, c, req).(*rpapi.PodHeaders)
	if !ok {
		t.Fatal("the pod mounting the volume was not created")
	}
	if m, ok := p.Response.Mounts.Get(); !ok || len(m.Network) != 1 || m.Network[0].VolumeId != vol {
		t.Errorf("pod.mounts = %+v; want the volume", p.Response.Mounts)
	}
	view, _ := f.Pod(p.Response.ID)
	if view.NetworkVolume != vol || view.VolumePath != "/runpod-volume" || view.DataCenter != "EU-RO-1" {
		t.Errorf("pod %+v; want volume %s at /runpod-volume, in EU-RO-1", view, vol)
	}
	del, err := c.DeleteNetworkVolume(ctx, rpapi.DeleteNetworkVolumeParams{ID: vol})
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, "deleting a mounted volume", del, http.StatusConflict, p.Response.ID)
	if _, err := c.DeletePod(ctx, rpapi.DeletePodParams{ID: p.Response.ID}); err != nil {
		t.Fatal(err)
	}
	if del, err = c.DeleteNetworkVolume(ctx, rpapi.DeleteNetworkVolumeParams{ID: vol}); err != nil {
		t.Fatal(err)
	} else if _, ok := del.(*rpapi.DeleteNetworkVolumeNoContent); !ok {
		t.Fatalf("DeleteNetworkVolume once no pod mounts it = %#v; want 204", del)
	}
}
