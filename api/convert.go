package api

import (
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// opt is what every generated optional type offers.
type opt[T any] interface{ Get() (T, bool) }

// optPtr turns a generated optional into a pointer: nil when unset.
func optPtr[T any](o opt[T]) *T {
	if v, ok := o.Get(); ok {
		return &v
	}
	return nil
}

// nilString splits an optional nullable string: set reports presence, v is nil for null.
func nilString(o oas.OptNilString) (set bool, v *string) {
	if !o.Set {
		return false, nil
	}
	if o.Null {
		return true, nil
	}
	s := o.Value
	return true, &s
}

func toNilString(p *string) oas.OptNilString {
	if p == nil {
		return oas.OptNilString{Set: true, Null: true}
	}
	return oas.NewOptNilString(*p)
}

func scalingFrom(s oas.Scaling) core.Scaling {
	if s.Type == oas.RequestCountScalingScaling {
		return core.Scaling{Type: core.ScaleRequestCount, RequestCount: s.RequestCountScaling.RequestCount}
	}
	return core.Scaling{Type: core.ScaleQueueDelay, QueueDelay: s.QueueDelayScaling.QueueDelay}
}

func scalingTo(s core.Scaling) oas.Scaling {
	if s.Type == core.ScaleRequestCount {
		return oas.NewRequestCountScalingScaling(oas.RequestCountScaling{
			Type: oas.RequestCountScalingTypeREQUESTCOUNT, RequestCount: s.RequestCount})
	}
	return oas.NewQueueDelayScalingScaling(oas.QueueDelayScaling{
		Type: oas.QueueDelayScalingTypeQUEUEDELAY, QueueDelay: s.QueueDelay})
}

func workersDraft(o oas.OptWorkers) *core.WorkersDraft {
	w, ok := o.Get()
	if !ok {
		return nil
	}
	return &core.WorkersDraft{Min: optPtr(w.Min), Max: optPtr(w.Max), IdleTimeout: optPtr(w.IdleTimeout)}
}

func endpointDraft(r *oas.CreateEndpointRequest) core.EndpointDraft {
	d := core.EndpointDraft{
		Name:                r.Name,
		Type:                core.EndpointType(r.Type),
		GPU:                 core.GPUDraft{Pools: r.Gpu.Pools, Count: optPtr(r.Gpu.Count)},
		Scaling:             scalingFrom(r.Scaling),
		TemplateID:          r.TemplateId.Or(""),
		Image:               optPtr(r.Image),
		Args:                optPtr(r.Args),
		Disk:                optPtr(r.Disk),
		Ports:               r.Ports,
		Env:                 r.Env.Or(nil),
		Workers:             workersDraft(r.Workers),
		DataCenterIDs:       r.DataCenterIds,
		NetworkVolumes:      r.NetworkVolumes,
		TimeoutMs:           optPtr(r.Timeout),
		AllowedCudaVersions: r.AllowedCudaVersions,
	}
	d.RegistrySet, d.Registry = nilString(r.Registry)
	if fb, ok := r.Flashboot.Get(); ok {
		v := core.Flashboot(fb)
		d.Flashboot = &v
	}
	return d
}

func endpointPatch(r *oas.UpdateEndpointRequest) core.EndpointPatch {
	p := core.EndpointPatch{
		Name:                optPtr(r.Name),
		Image:               optPtr(r.Image),
		Args:                optPtr(r.Args),
		Disk:                optPtr(r.Disk),
		Ports:               r.Ports,
		Env:                 r.Env.Or(nil),
		Workers:             workersDraft(r.Workers),
		DataCenterIDs:       r.DataCenterIds,
		NetworkVolumes:      r.NetworkVolumes,
		TimeoutMs:           optPtr(r.Timeout),
		AllowedCudaVersions: r.AllowedCudaVersions,
	}
	p.RegistrySet, p.Registry = nilString(r.Registry)
	if g, ok := r.Gpu.Get(); ok {
		p.GPU = &core.GPUDraft{Pools: g.Pools, Count: optPtr(g.Count)}
	}
	if s, ok := r.Scaling.Get(); ok {
		v := scalingFrom(s)
		p.Scaling = &v
	}
	if fb, ok := r.Flashboot.Get(); ok {
		v := core.Flashboot(fb)
		p.Flashboot = &v
	}
	return p
}

// endpoint renders an endpoint (spec 2.1); request URLs are built from the public URL now, so
// a changed --public-url applies to existing endpoints.
func (h *handler) endpoint(e *core.Endpoint) oas.Endpoint {
	out := oas.Endpoint{
		ID:                  e.ID,
		Name:                e.Name,
		Type:                oas.NewOptEndpointType(oas.EndpointType(e.Type)),
		Image:               oas.NewOptString(e.Image),
		Ports:               e.Ports,
		Gpu:                 oas.NewOptGpuConfig(oas.GpuConfig{Pools: e.GPU.Pools, Count: oas.NewOptInt(e.GPU.Count)}),
		Workers:             oas.EndpointWorkers{Min: e.Workers.Min, Max: e.Workers.Max},
		Scaling:             scalingTo(e.Scaling),
		DataCenterIds:       e.DataCenterIDs,
		NetworkVolumes:      e.NetworkVolumes,
		Timeout:             e.TimeoutMs,
		Flashboot:           oas.Flashboot(e.Flashboot),
		AllowedCudaVersions: e.AllowedCudaVersions,
		CreatedAt:           e.CreatedAt,
		Registry:            toNilString(e.Registry),
	}
	if e.IdleTimeoutApplies() {
		out.Workers.IdleTimeout = oas.NewOptInt(e.Workers.IdleTimeout)
	}
	if e.TemplateID != "" {
		out.TemplateId = oas.NewOptString(e.TemplateID)
	}
	if e.Args != "" {
		out.Args = oas.NewOptString(e.Args)
	}
	if e.Disk > 0 {
		out.Disk = oas.NewOptInt(e.Disk)
	}
	if e.Env != nil {
		out.Env = oas.NewOptEndpointEnv(e.Env)
	}
	urls := core.RequestURLs(h.cfg.PublicURL, e)
	if e.Type == core.TypeLoadBalancer {
		out.RequestUrls = oas.NewOptRequestUrls(oas.NewLoadBalancerRequestUrlsRequestUrls(oas.LoadBalancerRequestUrls{
			Base: urls["base"], Health: urls["health"]}))
	} else {
		out.RequestUrls = oas.NewOptRequestUrls(oas.NewQueueRequestUrlsRequestUrls(oas.QueueRequestUrls{
			Run: urls["run"], RunSync: urls["runSync"], Status: urls["status"], Stream: urls["stream"],
			Cancel: urls["cancel"], Retry: urls["retry"], PurgeQueue: urls["purgeQueue"], Health: urls["health"]}))
	}
	return out
}

func template(t *core.Template) oas.Template {
	out := oas.Template{
		ID: t.ID, Name: t.Name, Image: t.Image, Ports: t.Ports, Env: t.Env,
		Registry: toNilString(t.Registry), AllowedCudaVersions: t.AllowedCudaVersions,
		StartSsh: t.StartSSH, StartJupyter: t.StartJupyter, IsServerless: t.IsServerless,
		IsPublic: t.IsPublic, CreatedAt: t.CreatedAt,
	}
	if out.Ports == nil {
		out.Ports = []string{}
	}
	if out.Env == nil {
		out.Env = oas.TemplateEnv{}
	}
	if out.AllowedCudaVersions == nil {
		out.AllowedCudaVersions = []string{}
	}
	if t.Args != "" {
		out.Args = oas.NewOptString(t.Args)
	}
	if t.Disk > 0 {
		out.Disk = oas.NewOptInt(t.Disk)
	}
	return out
}
