package runpod

// This file is the pool's network volumes (pool.VolumeStorage): each Gantry volume is a
// RunPod network volume made through RunPod's own API, in the RunPod data center the Gantry
// volume names, and a worker's pod mounts it at core.VolumeMountPath (RunPod mounts it; the
// pod only names it). The RunPod volume is named after the installation and Gantry's volume
// id (volumeName), and found again by listing the account's volumes: the mapping survives a
// restart of Gantry with nothing stored on Gantry's side.

import (
	"context"
	"fmt"
	"slices"

	"github.com/gantryhq/gantry/adapters/runpod/rpapi"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// volumeName is the name of the RunPod network volume that stores Gantry volume id.
func volumeName(installation, id string) string { return "gantry-" + installation + "-vol-" + id }

// volumeDataCenter is the RunPod data center that holds v: its own data center when the pool
// may place pods there, the pool's first data center when v names the pool's (catalog) data
// center, and an error when neither says a RunPod data center.
func (p *Pool) volumeDataCenter(v core.Volume) (string, error) {
	dc := v.DataCenter
	if len(p.cfg.DataCenters) > 0 && !slices.Contains(p.cfg.DataCenters, dc) {
		if dc != p.desc.DataCenter {
			return "", fmt.Errorf("volume %s is in data center %q, not one of pool %s's dataCenters %v", v.ID, dc, p.desc.ID, p.cfg.DataCenters)
		}
		dc = p.cfg.DataCenters[0]
	}
	if dc == "" || dc == "RUNPOD" {
		return "", fmt.Errorf("volume %s: pool %s has no RunPod data center to keep it in: set the pool's dataCenters", v.ID, p.desc.ID)
	}
	return dc, nil
}

// findVolume returns the RunPod network volume that stores v, or nil if there is none, and
// notes its id for mountVolume.
func (p *Pool) findVolume(ctx context.Context, v core.Volume) (*rpapi.NetworkVolume, error) {
	vols, err := p.listVolumes(ctx)
	if err != nil {
		return nil, err
	}
	name := volumeName(p.cfg.Installation, v.ID)
	for i := range vols {
		if vols[i].Name == name {
			p.volumes.Store(v.ID, vols[i].ID)
			return &vols[i], nil
		}
	}
	p.volumes.Delete(v.ID)
	return nil, nil
}

// EnsureVolume creates v's RunPod network volume (its size, its data center and, when v says
// one, its type) or grows it to v.SizeGB; it never shrinks one (implements
// pool.VolumeStorage).
func (p *Pool) EnsureVolume(ctx context.Context, v core.Volume) error {
	dc, err := p.volumeDataCenter(v)
	if err != nil {
		return err
	}
	rv, err := p.findVolume(ctx, v)
	if err != nil {
		return fmt.Errorf("volume %s: %w", v.ID, err)
	}
	if rv == nil {
		req := &rpapi.CreateNetworkVolume{Name: volumeName(p.cfg.Installation, v.ID), Size: v.SizeGB, DataCenter: dc}
		if v.Type != "" {
			req.Type = rpapi.NewOptVolumeType(rpapi.VolumeType(v.Type))
		}
		created, err := p.createVolume(ctx, req)
		if err != nil {
			return fmt.Errorf("volume %s: %w", v.ID, err)
		}
		p.volumes.Store(v.ID, created.ID)
		p.log.Info("network volume created", "volume", v.ID, "runpodVolume", created.ID, "dataCenter", dc, "gb", v.SizeGB)
		return nil
	}
	if rv.DataCenter != dc {
		return fmt.Errorf("volume %s: its RunPod volume %s is in %s, not %s (a data center is fixed)", v.ID, rv.ID, rv.DataCenter, dc)
	}
	if rv.Size < v.SizeGB {
		if _, err := p.updateVolume(ctx, rv.ID, &rpapi.UpdateNetworkVolume{Size: rpapi.NewOptInt(v.SizeGB)}); err != nil {
			return fmt.Errorf("volume %s: growing RunPod volume %s to %d GB: %w", v.ID, rv.ID, v.SizeGB, err)
		}
		p.log.Info("network volume grown", "volume", v.ID, "runpodVolume", rv.ID, "from", rv.Size, "gb", v.SizeGB)
	}
	return nil
}

// DeleteVolume deletes v's RunPod network volume and its data; none is not an error
// (implements pool.VolumeStorage).
func (p *Pool) DeleteVolume(ctx context.Context, v core.Volume) error {
	rv, err := p.findVolume(ctx, v)
	if err != nil {
		return fmt.Errorf("volume %s: %w", v.ID, err)
	}
	if rv == nil {
		return nil
	}
	if err := p.deleteVolume(ctx, rv.ID); err != nil && !isNotFound(err) {
		return fmt.Errorf("volume %s: %w", v.ID, err)
	}
	p.volumes.Delete(v.ID)
	p.log.Info("network volume deleted", "volume", v.ID, "runpodVolume", rv.ID)
	return nil
}

// VolumeUsage answers -1: RunPod's API does not say how much of a volume is used (implements
// pool.VolumeStorage).
func (p *Pool) VolumeUsage(context.Context, core.Volume) (int64, error) { return -1, nil }

// mountVolume makes a pod create mount spec's volume at core.VolumeMountPath and places the
// pod in the volume's data center. The volume must exist (EnsureVolume); its RunPod id is the
// one EnsureVolume found or made, else it is looked up (one list), so that a burst of starts
// does not list the volumes once a worker.
func (p *Pool) mountVolume(ctx context.Context, req *rpapi.CreatePod, v core.Volume) error {
	dc, err := p.volumeDataCenter(v)
	if err != nil {
		return err
	}
	id, ok := p.volumes.Load(v.ID)
	if !ok {
		rv, err := p.findVolume(ctx, v)
		if err != nil {
			return fmt.Errorf("volume %s: %w", v.ID, err)
		}
		if rv == nil {
			return fmt.Errorf("volume %s: RunPod has no network volume %q (it was never made, or was deleted)", v.ID, volumeName(p.cfg.Installation, v.ID))
		}
		id = rv.ID
	}
	req.Mounts = rpapi.NewOptMounts(rpapi.Mounts{Network: []rpapi.NetworkMount{{VolumeId: id.(string), Path: core.VolumeMountPath}}})
	req.DataCenterIds = []string{dc}
	return nil
}

// forgetVolume drops the noted RunPod id of the volume a failed create mounted: RunPod may
// have lost it (deleted behind Gantry's back), and the next start looks it up again.
func (p *Pool) forgetVolume(req *rpapi.CreatePod) {
	if m, ok := req.Mounts.Get(); ok && len(m.Network) > 0 {
		p.volumes.Range(func(k, v any) bool {
			if v == m.Network[0].VolumeId {
				p.volumes.Delete(k)
			}
			return true
		})
	}
}

// The network volume API calls, each turning error answers into *APIError.

func (p *Pool) listVolumes(ctx context.Context) ([]rpapi.NetworkVolume, error) {
	res, err := p.api.ListNetworkVolumes(ctx)
	if err != nil {
		return nil, fmt.Errorf("RunPod listNetworkVolumes: %w", err)
	}
	switch r := res.(type) {
	case *rpapi.NetworkVolumeListHeaders:
		p.noteHealth(nil)
		return r.Response.NetworkVolumes, nil
	case *rpapi.ProblemStatusCodeWithHeaders:
		err := apiError("listNetworkVolumes", r)
		p.noteHealth(err)
		return nil, err
	}
	return nil, unexpected("listNetworkVolumes", res)
}

func (p *Pool) createVolume(ctx context.Context, req *rpapi.CreateNetworkVolume) (*rpapi.NetworkVolume, error) {
	res, err := p.api.CreateNetworkVolume(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("RunPod createNetworkVolume: %w", err)
	}
	switch r := res.(type) {
	case *rpapi.NetworkVolumeHeaders:
		p.noteHealth(nil)
		return &r.Response, nil
	case *rpapi.ProblemStatusCodeWithHeaders:
		err := apiError("createNetworkVolume", r)
		p.noteHealth(err)
		return nil, err
	}
	return nil, unexpected("createNetworkVolume", res)
}

func (p *Pool) updateVolume(ctx context.Context, id string, req *rpapi.UpdateNetworkVolume) (*rpapi.NetworkVolume, error) {
	res, err := p.api.UpdateNetworkVolume(ctx, req, rpapi.UpdateNetworkVolumeParams{ID: id})
	if err != nil {
		return nil, fmt.Errorf("RunPod updateNetworkVolume %s: %w", id, err)
	}
	switch r := res.(type) {
	case *rpapi.NetworkVolumeHeaders:
		p.noteHealth(nil)
		return &r.Response, nil
	case *rpapi.ProblemStatusCodeWithHeaders:
		err := apiError("updateNetworkVolume "+id, r)
		p.noteHealth(err)
		return nil, err
	}
	return nil, unexpected("updateNetworkVolume", res)
}

func (p *Pool) deleteVolume(ctx context.Context, id string) error {
	res, err := p.api.DeleteNetworkVolume(ctx, rpapi.DeleteNetworkVolumeParams{ID: id})
	if err != nil {
		return fmt.Errorf("RunPod deleteNetworkVolume %s: %w", id, err)
	}
	switch r := res.(type) {
	case *rpapi.DeleteNetworkVolumeNoContent:
		p.noteHealth(nil)
		return nil
	case *rpapi.ProblemStatusCodeWithHeaders:
		err := apiError("deleteNetworkVolume "+id, r)
		p.noteHealth(err)
		return err
	}
	return unexpected("deleteNetworkVolume", res)
}

var _ pool.VolumeStorage = (*Pool)(nil)
