package runpodfake

// This file is the fake's network volumes: create, list, get, update (rename, grow) and
// delete, with RunPod's rules (size 10..4096 GB, a data center the fake offers, no shrink, the
// data center and type fixed), and the check that a pod mounting one is placed in its data
// center. A volume that a pod still mounts cannot be deleted (409): the fake's choice, so
// that a test sees a delete that came too early.

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/gantryhq/gantry/adapters/runpod/rpapi"
	"github.com/gantryhq/gantry/core"
)

// Volume is what a test sees of a fake network volume.
type Volume struct {
	ID, Name, DataCenter, Type string
	Size                       int // GB
}

// volume is one network volume of the fake.
type volume struct {
	seq int
	v   rpapi.NetworkVolume
}

// volumeLimits are RunPod's bounds of a network volume's size, in GB.
const (
	minVolumeGB = 10
	maxVolumeGB = 4096
)

// dataCenters are the data centers the fake offers: those of its GPU types. f.mu is held.
func (f *Fake) dataCenters() []string {
	var out []string
	for _, g := range f.gpus {
		for _, dc := range g.DataCenters {
			if !slices.Contains(out, dc) {
				out = append(out, dc)
			}
		}
	}
	slices.Sort(out)
	return out
}

// volumeByID returns volume id or the 404. f.mu is held.
func (f *Fake) volumeByID(id string) (*volume, *rpapi.ProblemStatusCodeWithHeaders) {
	v := f.vols[id]
	if v == nil {
		return nil, problem(http.StatusNotFound, fmt.Sprintf("network volume %q not found", id))
	}
	return v, nil
}

// mountedBy lists the pods that mount volume id. f.mu is held.
func (f *Fake) mountedBy(id string) []string {
	var out []string
	for _, p := range f.sorted() {
		if slices.Contains(p.volumes(), id) {
			out = append(out, p.id)
		}
	}
	return out
}

// volumes are the ids of the network volumes the pod mounts.
func (p *pod) volumes() []string {
	var out []string
	if m, ok := p.req.Mounts.Get(); ok {
		for _, n := range m.Network {
			out = append(out, n.VolumeId)
		}
	}
	return out
}

// checkMounts checks a create's network mounts: at most one, of a volume that exists, at an
// absolute path. It returns the data center the pod must be placed in ("" = any). f.mu is
// held.
func (f *Fake) checkMounts(req *rpapi.CreatePod) (string, *rpapi.ProblemStatusCodeWithHeaders) {
	m, ok := req.Mounts.Get()
	if !ok || len(m.Network) == 0 {
		return "", nil
	}
	if len(m.Network) > 1 {
		return "", problem(http.StatusBadRequest, "mounts.network: at most one network volume per pod")
	}
	n := m.Network[0]
	if !strings.HasPrefix(n.Path, "/") {
		return "", problem(http.StatusBadRequest, fmt.Sprintf("mounts.network[0].path %q: want an absolute path", n.Path))
	}
	v, prob := f.volumeByID(n.VolumeId)
	if prob != nil {
		return "", problem(http.StatusBadRequest, fmt.Sprintf("mounts.network[0].volumeId: network volume %q not found", n.VolumeId))
	}
	return v.v.DataCenter, nil
}

// CreateNetworkVolume creates a volume in a data center the fake offers (400 otherwise).
func (h handler) CreateNetworkVolume(_ context.Context, req *rpapi.CreateNetworkVolume) (rpapi.CreateNetworkVolumeRes, error) {
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.Size < minVolumeGB || req.Size > maxVolumeGB { // the generated server checks too
		return problem(http.StatusBadRequest, fmt.Sprintf("size %d: want %d to %d GB", req.Size, minVolumeGB, maxVolumeGB)), nil
	}
	if dcs := f.dataCenters(); !slices.Contains(dcs, req.DataCenter) {
		return problem(http.StatusBadRequest, fmt.Sprintf("dataCenter %q: not one of %s", req.DataCenter, strings.Join(dcs, ", "))), nil
	}
	if f.vols == nil {
		f.vols = map[string]*volume{}
	}
	f.vseq++
	v := &volume{seq: f.vseq, v: rpapi.NetworkVolume{ID: strings.ToLower(core.NewID(10)), Name: req.Name, Size: req.Size,
		DataCenter: req.DataCenter, Type: req.Type.Or(rpapi.VolumeTypeSTANDARD)}}
	f.vols[v.v.ID] = v
	return &rpapi.NetworkVolumeHeaders{Response: v.v}, nil
}

// ListNetworkVolumes lists the account's volumes, oldest first.
func (h handler) ListNetworkVolumes(context.Context) (rpapi.ListNetworkVolumesRes, error) {
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	out := rpapi.NetworkVolumeList{NetworkVolumes: []rpapi.NetworkVolume{}}
	for _, v := range f.sortedVolumes() {
		out.NetworkVolumes = append(out.NetworkVolumes, v.v)
	}
	return &rpapi.NetworkVolumeListHeaders{Response: out}, nil
}

// GetNetworkVolume answers one volume.
func (h handler) GetNetworkVolume(_ context.Context, params rpapi.GetNetworkVolumeParams) (rpapi.GetNetworkVolumeRes, error) {
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	v, prob := f.volumeByID(params.ID)
	if prob != nil {
		return prob, nil
	}
	return &rpapi.NetworkVolumeHeaders{Response: v.v}, nil
}

// UpdateNetworkVolume renames or grows a volume; a smaller size answers 400.
func (h handler) UpdateNetworkVolume(_ context.Context, req *rpapi.UpdateNetworkVolume, params rpapi.UpdateNetworkVolumeParams) (rpapi.UpdateNetworkVolumeRes, error) {
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	v, prob := f.volumeByID(params.ID)
	if prob != nil {
		return prob, nil
	}
	if !req.Name.Set && !req.Size.Set {
		return problem(http.StatusBadRequest, "an update needs name or size"), nil
	}
	if size, ok := req.Size.Get(); ok {
		if size < v.v.Size {
			return problem(http.StatusBadRequest, fmt.Sprintf("size %d: a network volume cannot shrink (it has %d GB)", size, v.v.Size)), nil
		}
		if size > maxVolumeGB {
			return problem(http.StatusBadRequest, fmt.Sprintf("size %d: at most %d GB", size, maxVolumeGB)), nil
		}
		v.v.Size = size
	}
	v.v.Name = req.Name.Or(v.v.Name)
	return &rpapi.NetworkVolumeHeaders{Response: v.v}, nil
}

// DeleteNetworkVolume deletes a volume and its data; one a pod mounts answers 409.
func (h handler) DeleteNetworkVolume(_ context.Context, params rpapi.DeleteNetworkVolumeParams) (rpapi.DeleteNetworkVolumeRes, error) {
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, prob := f.volumeByID(params.ID); prob != nil {
		return prob, nil
	}
	if pods := f.mountedBy(params.ID); len(pods) > 0 {
		return problem(http.StatusConflict, fmt.Sprintf("network volume %q is mounted by pods %s", params.ID, strings.Join(pods, ", "))), nil
	}
	delete(f.vols, params.ID)
	return &rpapi.DeleteNetworkVolumeNoContent{}, nil
}

// sortedVolumes returns the volumes in creation order. f.mu is held.
func (f *Fake) sortedVolumes() []*volume {
	out := slices.Collect(maps.Values(f.vols))
	slices.SortFunc(out, func(a, b *volume) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// Volumes returns the network volumes that exist, oldest first.
func (f *Fake) Volumes() []Volume {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Volume
	for _, v := range f.sortedVolumes() {
		out = append(out, Volume{ID: v.v.ID, Name: v.v.Name, DataCenter: v.v.DataCenter, Type: string(v.v.Type), Size: v.v.Size})
	}
	return out
}
