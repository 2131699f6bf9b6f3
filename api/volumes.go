package api

import (
	"context"
	"strings"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// This file is the network volume API (issue 30): /v2/network-volumes, in RunPod's shapes,
// and the Warning header of endpoint writes whose pools cannot mount a volume at
// /runpod-volume.

func init() {
	access[oas.CreateNetworkVolumeOperation] = core.ManageWrite
	access[oas.ListNetworkVolumesOperation] = core.ManageRead
	access[oas.GetNetworkVolumeOperation] = core.ManageRead
	access[oas.UpdateNetworkVolumeOperation] = core.ManageWrite
	access[oas.DeleteNetworkVolumeOperation] = core.ManageWrite
}

func networkVolume(v *core.Volume) oas.NetworkVolume {
	out := oas.NetworkVolume{ID: v.ID, Name: v.Name, Size: v.SizeGB, DataCenter: v.DataCenter,
		Type: oas.VolumeType(v.Type), Operator: v.Owner == ""}
	if !v.CreatedAt.IsZero() {
		out.CreatedAt = oas.NewOptDateTime(v.CreatedAt)
	}
	return out
}

// CreateNetworkVolume implements createNetworkVolume.
func (h *handler) CreateNetworkVolume(ctx context.Context, req *oas.CreateNetworkVolumeRequest) (oas.CreateNetworkVolumeRes, error) {
	d := core.VolumeDraft{Name: req.Name, SizeGB: req.Size, DataCenter: req.DataCenter}
	if t, ok := req.Type.Get(); ok {
		d.Type = string(t)
	}
	v, err := h.mgmt().CreateVolume(ctx, principalOf(ctx).User, d)
	if err != nil {
		return nil, err
	}
	return &oas.NetworkVolumeHeaders{Response: networkVolume(&v)}, nil
}

// ListNetworkVolumes implements listNetworkVolumes.
func (h *handler) ListNetworkVolumes(ctx context.Context) (oas.ListNetworkVolumesRes, error) {
	vs, err := h.mgmt().ListVolumes(ctx, principalOf(ctx).User)
	if err != nil {
		return nil, err
	}
	out := oas.NetworkVolumeList{NetworkVolumes: make([]oas.NetworkVolume, len(vs))}
	for i := range vs {
		out.NetworkVolumes[i] = networkVolume(&vs[i])
	}
	return &oas.NetworkVolumeListHeaders{Response: out}, nil
}

// GetNetworkVolume implements getNetworkVolume, with the bytes the volume holds where its
// storage can tell.
func (h *handler) GetNetworkVolume(ctx context.Context, params oas.GetNetworkVolumeParams) (oas.GetNetworkVolumeRes, error) {
	v, err := h.mgmt().GetVolume(ctx, principalOf(ctx).User, params.NetworkVolumeId)
	if err != nil {
		return nil, err
	}
	out := networkVolume(&v)
	if n, ok := h.mgmt().VolumeUsage(ctx, v); ok {
		out.UsedBytes = oas.NewOptInt64(n)
	}
	return &oas.NetworkVolumeHeaders{Response: out}, nil
}

// UpdateNetworkVolume implements updateNetworkVolume.
func (h *handler) UpdateNetworkVolume(ctx context.Context, req *oas.UpdateNetworkVolumeRequest, params oas.UpdateNetworkVolumeParams) (oas.UpdateNetworkVolumeRes, error) {
	p := core.VolumePatch{Name: optPtr(req.Name), SizeGB: optPtr(req.Size),
		DataCenter: optPtr(req.DataCenter), Type: optPtr(req.Type)}
	v, err := h.mgmt().UpdateVolume(ctx, principalOf(ctx).User, params.NetworkVolumeId, p)
	if err != nil {
		return nil, err
	}
	return &oas.NetworkVolumeHeaders{Response: networkVolume(&v)}, nil
}

// DeleteNetworkVolume implements deleteNetworkVolume: the request is the confirmation.
func (h *handler) DeleteNetworkVolume(ctx context.Context, params oas.DeleteNetworkVolumeParams) (oas.DeleteNetworkVolumeRes, error) {
	if err := h.mgmt().DeleteVolume(ctx, principalOf(ctx).User, params.NetworkVolumeId); err != nil {
		return nil, err
	}
	return &oas.DeleteNetworkVolumeNoContent{}, nil
}

// warnVolumes puts what the pools of e say of its network volumes (those that cannot mount
// them at /runpod-volume) in Warning headers (RFC 9111 code 299) and the log.
func (h *handler) warnVolumes(ctx context.Context, e *core.Endpoint) {
	for _, w := range h.mgmt().VolumeWarnings(ctx, e) {
		h.cfg.Log.Warn("endpoint's network volume", "endpoint", e.ID, "warning", w)
		headerOf(ctx).Add("Warning", `299 - "`+strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(w)+`"`)
	}
}
