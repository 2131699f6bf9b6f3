package api

import (
	"context"
	"slices"

	"github.com/gantryhq/gantry/oas"
)

// This file is the catalog: the ready-made templates, and the GPU and CPU flavors the pools offer.

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
