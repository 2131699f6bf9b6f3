package api

import (
	"context"
	"slices"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// handler implements oas.Handler and oas.SecurityHandler. Operations later issues build answer
// 501 through the embedded UnimplementedHandler.
type handler struct {
	oas.UnimplementedHandler
	cfg *Config
}

func (h *handler) mgmt() *core.Management { return h.cfg.Management }

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

// CreateTemplate implements createTemplate.
func (h *handler) CreateTemplate(ctx context.Context, req *oas.CreateTemplateRequest) (oas.CreateTemplateRes, error) {
	d := core.TemplateDraft{
		Name: req.Name, Image: req.Image, Args: optPtr(req.Args), Disk: optPtr(req.Disk),
		Ports: req.Ports, Env: req.Env.Or(nil), AllowedCudaVersions: req.AllowedCudaVersions,
		StartSSH: req.StartSsh.Or(false), StartJupyter: req.StartJupyter.Or(false),
		IsServerless: req.IsServerless.Or(false),
	}
	_, d.Registry = nilString(req.Registry)
	t, err := h.mgmt().CreateTemplate(ctx, principalOf(ctx).User, d)
	if err != nil {
		return nil, err
	}
	return &oas.TemplateHeaders{Response: template(&t)}, nil
}

// ListTemplates implements listTemplates.
func (h *handler) ListTemplates(ctx context.Context, params oas.ListTemplatesParams) (oas.ListTemplatesRes, error) {
	ts, next, err := h.mgmt().ListTemplates(ctx, principalOf(ctx).User, params.Cursor.Or(""), params.Limit.Or(50))
	if err != nil {
		return nil, err
	}
	out := oas.TemplateList{Items: make([]oas.Template, len(ts))}
	for i := range ts {
		out.Items[i] = template(&ts[i])
	}
	if next != "" {
		out.NextCursor = oas.NewOptString(next)
	}
	return &oas.TemplateListHeaders{Response: out}, nil
}

// GetTemplate implements getTemplate.
func (h *handler) GetTemplate(ctx context.Context, params oas.GetTemplateParams) (oas.GetTemplateRes, error) {
	t, err := h.mgmt().GetTemplate(ctx, principalOf(ctx).User, params.TemplateId)
	if err != nil {
		return nil, err
	}
	return &oas.TemplateHeaders{Response: template(&t)}, nil
}

// UpdateTemplate implements updateTemplate.
func (h *handler) UpdateTemplate(ctx context.Context, req *oas.UpdateTemplateRequest, params oas.UpdateTemplateParams) (oas.UpdateTemplateRes, error) {
	p := core.TemplatePatch{
		Name: optPtr(req.Name), Image: optPtr(req.Image), Args: optPtr(req.Args), Disk: optPtr(req.Disk),
		Ports: req.Ports, Env: req.Env.Or(nil), AllowedCudaVersions: req.AllowedCudaVersions,
		StartSSH: optPtr(req.StartSsh), StartJupyter: optPtr(req.StartJupyter), IsServerless: optPtr(req.IsServerless),
	}
	p.RegistrySet, p.Registry = nilString(req.Registry)
	t, err := h.mgmt().UpdateTemplate(ctx, principalOf(ctx).User, params.TemplateId, p)
	if err != nil {
		return nil, err
	}
	return &oas.TemplateHeaders{Response: template(&t)}, nil
}

// DeleteTemplate implements deleteTemplate.
func (h *handler) DeleteTemplate(ctx context.Context, params oas.DeleteTemplateParams) (oas.DeleteTemplateRes, error) {
	if err := h.mgmt().DeleteTemplate(ctx, principalOf(ctx).User, params.TemplateId); err != nil {
		return nil, err
	}
	return &oas.DeleteTemplateNoContent{}, nil
}

// ListCatalogTemplates implements listCatalogTemplates.
func (h *handler) ListCatalogTemplates(ctx context.Context) (oas.ListCatalogTemplatesRes, error) {
	ts := h.mgmt().Catalog.PublicTemplates()
	out := make([]oas.Template, len(ts))
	for i := range ts {
		out[i] = template(&ts[i])
	}
	return &oas.ListCatalogTemplatesOKHeaders{Response: out}, nil
}

// ListCatalogGpus implements listCatalogGpus: one entry per pool.
func (h *handler) ListCatalogGpus(ctx context.Context, params oas.ListCatalogGpusParams) (oas.ListCatalogGpusRes, error) {
	cat := h.mgmt().Catalog
	withAvail := params.Include.Or("") == oas.ListCatalogGpusIncludeAVAILABILITY
	out := []oas.GpuType{}
	for _, p := range cat.Pools() {
		g := oas.GpuType{
			ID: p.GPUType, DisplayName: p.DisplayName, Pool: p.ID, Count: p.GPUs, DataCenterId: p.DataCenter,
		}
		if p.MemoryGB > 0 {
			g.MemoryInGb = oas.NewOptInt(p.MemoryGB)
		}
		if why := cat.PoolUnhealthy(p.ID); why != "" {
			g.Unhealthy = oas.NewOptString(why)
		}
		if withAvail {
			g.CudaVersions = slices.Clone(p.CUDAVersions)
			if g.CudaVersions == nil {
				g.CudaVersions = []string{}
			}
			g.Available = oas.NewOptInt(cat.AvailableGPUs(p))
			g.MaxGpuCount = oas.NewOptInt(cat.GPUsPerWorkerMax(p.ID))
		}
		out = append(out, g)
	}
	return &oas.ListCatalogGpusOKHeaders{Response: out}, nil
}

// ListCatalogCpus implements listCatalogCpus: one flavor per CPU pool.
func (h *handler) ListCatalogCpus(ctx context.Context) (oas.ListCatalogCpusRes, error) {
	out := []oas.CpuFlavor{}
	for _, p := range h.mgmt().Catalog.Pools() {
		if !p.CPU {
			continue
		}
		counts := []int{}
		for n := 2; n <= p.VCPUs; n *= 2 {
			counts = append(counts, n)
		}
		out = append(out, oas.CpuFlavor{
			ID: "cpu-" + p.ID, DisplayName: p.DisplayName, VcpuCounts: counts,
			MemoryPerVcpu: p.MemoryPerCPU, Pool: p.ID,
		})
	}
	return &oas.ListCatalogCpusOKHeaders{Response: out}, nil
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

var _ oas.Handler = (*handler)(nil)
var _ oas.SecurityHandler = (*handler)(nil)
