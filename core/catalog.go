package core

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// PoolInfo describes a GPU pool (or a pool of CPU slots) as the catalog shows it. Capacity is
// counted in GPUs, or in slots for a CPU pool.
type PoolInfo struct {
	ID           string   `json:"id" yaml:"id"`
	Adapter      string   `json:"adapter" yaml:"adapter"`                   // "process", "docker", ...
	GPUType      string   `json:"gpuType" yaml:"gpuType"`                   // e.g. "NVIDIA H100 80GB HBM3"; "CPU" for CPU slots
	DisplayName  string   `json:"displayName" yaml:"displayName"`           // defaults to GPUType
	MemoryGB     int      `json:"memoryInGb" yaml:"memoryInGb"`             // per GPU
	GPUs         int      `json:"count" yaml:"count"`                       // GPUs (or CPU slots) in the pool
	PerWorker    int      `json:"maxGpusPerWorker" yaml:"maxGpusPerWorker"` // largest gpu.count one worker may take; 0 = GPUs
	CUDAVersions []string `json:"cudaVersions" yaml:"cudaVersions"`         // exact major.minor values offered
	DataCenter   string   `json:"dataCenterId" yaml:"dataCenterId"`
	CPU          bool     `json:"cpu" yaml:"cpu"`                     // a pool of CPU slots rather than GPUs
	VCPUs        int      `json:"vcpus" yaml:"vcpus"`                 // CPU pools: vCPUs per host
	MemoryPerCPU int      `json:"memoryPerVcpu" yaml:"memoryPerVcpu"` // CPU pools: GB per vCPU
}

// GPUsPerWorkerMax is the largest gpu.count a worker placed on the pool may ask for.
func (p PoolInfo) GPUsPerWorkerMax() int {
	if p.PerWorker > 0 {
		return min(p.PerWorker, p.GPUs)
	}
	return p.GPUs
}

// NetworkVolume is a declared network volume; it pins workers to its data center.
type NetworkVolume struct {
	ID         string `json:"id" yaml:"id"`
	DataCenter string `json:"dataCenterId" yaml:"dataCenterId"`
	SizeGB     int    `json:"size" yaml:"size"`
}

// Catalog is the read-only view of the pools, data centers, network volumes and public
// templates that endpoints may name. Available reports capacity not reserved right now; until a
// scheduler supplies it, every GPU counts as available.
type Catalog struct {
	pools     []PoolInfo
	volumes   []NetworkVolume
	templates []Template
	// Available returns the GPUs (or slots) of a pool not reserved now; nil = all of them.
	Available func(poolID string) int
	// Total returns a pool's capacity now, for pools whose capacity changes (a cluster's
	// allocatable GPUs); nil = the count each pool was declared with.
	Total func(poolID string) int
	// Unhealthy returns why a pool cannot start workers now ("" when it can), for pools that
	// can tell (a cloud API refusing the pool's key); nil = every pool is healthy.
	Unhealthy func(poolID string) string
	// CanRun reports whether a pool can run an image, and when it cannot, why and how to fix
	// it; nil = every pool may run every image (see ImageRunner).
	CanRun ImageRunner
}

// NewCatalog returns a catalog of the given pools, volumes and public templates. Templates are
// marked public and serverless-or-not as given.
func NewCatalog(pools []PoolInfo, volumes []NetworkVolume, templates []Template) *Catalog {
	ts := slices.Clone(templates)
	for i := range ts {
		ts[i].IsPublic = true
		ts[i].Owner = ""
	}
	return &Catalog{pools: slices.Clone(pools), volumes: slices.Clone(volumes), templates: ts}
}

// Pools returns every pool, in configuration order.
func (c *Catalog) Pools() []PoolInfo {
	if c.Total == nil {
		return c.pools
	}
	out := slices.Clone(c.pools)
	for i := range out {
		out[i].GPUs = c.Total(out[i].ID)
	}
	return out
}

// Pool looks a pool up by id.
func (c *Catalog) Pool(id string) (PoolInfo, bool) {
	i := slices.IndexFunc(c.pools, func(p PoolInfo) bool { return p.ID == id })
	if i < 0 {
		return PoolInfo{}, false
	}
	p := c.pools[i]
	if c.Total != nil {
		p.GPUs = c.Total(p.ID)
	}
	return p, true
}

// HasDataCenter reports whether any pool or network volume is in the data center.
func (c *Catalog) HasDataCenter(id string) bool {
	return slices.ContainsFunc(c.pools, func(p PoolInfo) bool { return p.DataCenter == id }) ||
		slices.ContainsFunc(c.volumes, func(v NetworkVolume) bool { return v.DataCenter == id })
}

// NetworkVolume looks a network volume up by id.
func (c *Catalog) NetworkVolume(id string) (NetworkVolume, bool) {
	i := slices.IndexFunc(c.volumes, func(v NetworkVolume) bool { return v.ID == id })
	if i < 0 {
		return NetworkVolume{}, false
	}
	return c.volumes[i], true
}

// PublicTemplates returns the public catalog templates.
func (c *Catalog) PublicTemplates() []Template { return c.templates }

// PublicTemplate looks a public template up by id.
func (c *Catalog) PublicTemplate(id string) (Template, bool) {
	i := slices.IndexFunc(c.templates, func(t Template) bool { return t.ID == id })
	if i < 0 {
		return Template{}, false
	}
	return c.templates[i], true
}

// GPUsPerWorkerMax returns the largest gpu.count a worker placed on pool id may ask for: by
// the pool's description or by its capacity now, whichever allows more. A pool whose capacity
// changes (a cluster, a cloud's stock) takes workers of its size even while it has no room
// for one. 0 for an unknown pool.
func (c *Catalog) GPUsPerWorkerMax(id string) int {
	i := slices.IndexFunc(c.pools, func(p PoolInfo) bool { return p.ID == id })
	if i < 0 {
		return 0
	}
	live, _ := c.Pool(id)
	return max(c.pools[i].GPUsPerWorkerMax(), live.GPUsPerWorkerMax())
}

// PoolUnhealthy returns why the pool cannot start workers now; "" when it can.
func (c *Catalog) PoolUnhealthy(id string) string {
	if c.Unhealthy == nil {
		return ""
	}
	return c.Unhealthy(id)
}

// AvailableGPUs returns the GPUs (or slots) of the pool not reserved now.
func (c *Catalog) AvailableGPUs(p PoolInfo) int {
	if c.Available == nil {
		return p.GPUs
	}
	return c.Available(p.ID)
}

// SortCUDAVersions returns CUDA versions ("12.4") in ascending order without repeats, or an
// error naming one that is not major.minor.
func SortCUDAVersions(vs []string) ([]string, error) {
	type version struct {
		s          string
		major, min int
	}
	parsed := make([]version, 0, len(vs))
	for _, v := range vs {
		maj, mnr, ok := strings.Cut(v, ".")
		a, err1 := strconv.Atoi(maj)
		b, err2 := strconv.Atoi(mnr)
		if !ok || err1 != nil || err2 != nil || a < 0 || b < 0 {
			return nil, fmt.Errorf("CUDA version %q is not major.minor", v)
		}
		parsed = append(parsed, version{strconv.Itoa(a) + "." + strconv.Itoa(b), a, b})
	}
	slices.SortFunc(parsed, func(x, y version) int { return cmp.Or(cmp.Compare(x.major, y.major), cmp.Compare(x.min, y.min)) })
	parsed = slices.CompactFunc(parsed, func(x, y version) bool { return x.s == y.s })
	var out []string
	for _, v := range parsed {
		out = append(out, v.s)
	}
	return out, nil
}
