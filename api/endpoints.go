package api

import (
	"context"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// This file is the endpoint operations: create, list, get, update and delete (and the v1 form).

// CreateEndpoint implements createEndpoint (spec 4.1).
func (h *handler) CreateEndpoint(ctx context.Context, req *oas.CreateEndpointRequest) (oas.CreateEndpointRes, error) {
	e, err := h.mgmt().CreateEndpoint(ctx, principalOf(ctx).User, endpointDraft(req))
	if err != nil {
		return nil, err
	}
	h.warnVolumes(ctx, &e)
	return &oas.EndpointHeaders{Response: h.endpoint(&e)}, nil
}

// ListEndpoints implements listEndpoints.
func (h *handler) ListEndpoints(ctx context.Context, params oas.ListEndpointsParams) (oas.ListEndpointsRes, error) {
	es, next, err := h.mgmt().ListEndpoints(ctx, principalOf(ctx).User, params.Cursor.Or(""), params.Limit.Or(50))
	if err != nil {
		return nil, err
	}
	out := oas.EndpointList{Items: make([]oas.Endpoint, len(es))}
	for i := range es {
		out.Items[i] = h.endpoint(&es[i])
	}
	if next != "" {
		out.NextCursor = oas.NewOptString(next)
	}
	return &oas.EndpointListHeaders{Response: out}, nil
}

// GetEndpoint implements getEndpoint.
func (h *handler) GetEndpoint(ctx context.Context, params oas.GetEndpointParams) (oas.GetEndpointRes, error) {
	e, err := h.mgmt().GetEndpoint(ctx, principalOf(ctx).User, params.EndpointId)
	if err != nil {
		return nil, err
	}
	return &oas.EndpointHeaders{Response: h.endpoint(&e)}, nil
}

// UpdateEndpoint implements updateEndpoint.
func (h *handler) UpdateEndpoint(ctx context.Context, req *oas.UpdateEndpointRequest, params oas.UpdateEndpointParams) (oas.UpdateEndpointRes, error) {
	e, err := h.mgmt().UpdateEndpoint(ctx, principalOf(ctx).User, params.EndpointId, endpointPatch(req))
	if err != nil {
		return nil, err
	}
	h.warnVolumes(ctx, &e)
	return &oas.EndpointHeaders{Response: h.endpoint(&e)}, nil
}

// DeleteEndpoint implements deleteEndpoint.
func (h *handler) DeleteEndpoint(ctx context.Context, params oas.DeleteEndpointParams) (oas.DeleteEndpointRes, error) {
	if err := h.mgmt().DeleteEndpoint(ctx, principalOf(ctx).User, params.EndpointId); err != nil {
		return nil, err
	}
	return &oas.DeleteEndpointNoContent{}, nil
}

// CreateEndpointV1 implements createEndpointV1 (spec 4.6).
func (h *handler) CreateEndpointV1(ctx context.Context, req *oas.V1CreateEndpointRequest) (oas.CreateEndpointV1Res, error) {
	d := core.V1Draft{
		Name: req.Name, TemplateID: req.TemplateId, GPUTypeIDs: req.GpuTypeIds,
		GPUCount: optPtr(req.GpuCount), WorkersMin: optPtr(req.WorkersMin), WorkersMax: optPtr(req.WorkersMax),
		IdleTimeout: optPtr(req.IdleTimeout), ScalerValue: optPtr(req.ScalerValue), Flashboot: optPtr(req.Flashboot),
		ExecutionTimeoutMs: optPtr(req.ExecutionTimeoutMs), DataCenterIDs: req.DataCenterIds,
		NetworkVolumeID: optPtr(req.NetworkVolumeId), AllowedCudaVersions: req.AllowedCudaVersions,
	}
	if st, ok := req.ScalerType.Get(); ok {
		t := core.ScalerType(st)
		d.ScalerType = &t
	}
	e, err := h.mgmt().CreateEndpointV1(ctx, principalOf(ctx).User, d)
	if err != nil {
		return nil, err
	}
	h.warnVolumes(ctx, &e)
	v := oas.V1Endpoint{
		ID: e.ID, Name: e.Name, TemplateId: e.TemplateID, GpuTypeIds: h.mgmt().V1GPUTypes(&e), GpuCount: e.GPU.Count,
		WorkersMin: e.Workers.Min, WorkersMax: e.Workers.Max, ScalerType: string(e.Scaling.Type),
		Flashboot: e.Flashboot != core.FlashbootOff, ExecutionTimeoutMs: e.TimeoutMs,
		DataCenterIds: e.DataCenterIDs, AllowedCudaVersions: e.AllowedCudaVersions,
	}
	if e.Scaling.Type == core.ScaleQueueDelay {
		v.ScalerValue = e.Scaling.QueueDelay
	} else {
		v.ScalerValue = float64(e.Scaling.RequestCount)
	}
	if e.IdleTimeoutApplies() {
		v.IdleTimeout = oas.NewOptInt(e.Workers.IdleTimeout)
	}
	if len(e.NetworkVolumes) > 0 {
		v.NetworkVolumeId = oas.NewOptString(e.NetworkVolumes[0])
	}
	return &oas.V1EndpointHeaders{Response: v}, nil
}
