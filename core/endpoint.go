package core

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// EndpointType is the request-routing model of an endpoint (spec 2.1).
type EndpointType string

// Endpoint types.
const (
	TypeQueue        EndpointType = "QUEUE"
	TypeLoadBalancer EndpointType = "LOAD_BALANCER"
)

// ScalerType names the autoscaling signal (spec 2.4).
type ScalerType string

// Scaler types.
const (
	ScaleQueueDelay   ScalerType = "QUEUE_DELAY"
	ScaleRequestCount ScalerType = "REQUEST_COUNT"
)

// Flashboot is the cold-start acceleration mode (spec 2.5).
type Flashboot string

// Cold-start modes.
const (
	FlashbootOff      Flashboot = "OFF"
	FlashbootOn       Flashboot = "FLASHBOOT"
	FlashbootPriority Flashboot = "PRIORITY_FLASHBOOT"
)

// Defaults applied on create (spec 2.3, 4.1, 8).
const (
	DefaultWorkersMin   = 0
	DefaultWorkersMax   = 3
	DefaultIdleTimeout  = 10     // seconds
	DefaultTimeoutMs    = 300000 // milliseconds
	DefaultGPUCount     = 1
	MaxEndpointsPerPage = 100
)

// Scaling is the autoscaling policy: QueueDelay (seconds) for QUEUE_DELAY, RequestCount for
// REQUEST_COUNT.
type Scaling struct {
	Type         ScalerType `json:"type"`
	QueueDelay   float64    `json:"queueDelay,omitempty"`
	RequestCount int        `json:"requestCount,omitempty"`
}

// Workers bounds an endpoint's worker count. IdleTimeout is in seconds; 0 means "does not apply"
// (a QUEUE endpoint scaling on REQUEST_COUNT).
type Workers struct {
	Min         int `json:"min"`
	Max         int `json:"max"`
	IdleTimeout int `json:"idleTimeout,omitempty"`
}

// GPU is where and how big each worker is: pools in preference order, GPUs per worker.
type GPU struct {
	Pools []string `json:"pools"`
	Count int      `json:"count"`
}

// Container is what a worker runs: the settings a template supplies.
type Container struct {
	Image    string            `json:"image"`
	Args     string            `json:"args,omitempty"`
	Disk     int               `json:"disk,omitempty"` // GB; 0 = the pool's default
	Ports    []string          `json:"ports,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Registry *string           `json:"registry,omitempty"` // registry credential id; nil = none
}

// Endpoint is a serverless endpoint as stored.
type Endpoint struct {
	ID         string       `json:"id"`
	Owner      string       `json:"owner"`
	Name       string       `json:"name"`
	Type       EndpointType `json:"type"`
	TemplateID string       `json:"templateId,omitempty"`
	Container
	GPU                 GPU       `json:"gpu"`
	Workers             Workers   `json:"workers"`
	Scaling             Scaling   `json:"scaling"`
	DataCenterIDs       []string  `json:"dataCenterIds"`
	NetworkVolumes      []string  `json:"networkVolumes"`
	TimeoutMs           int64     `json:"timeout"`
	Flashboot           Flashboot `json:"flashboot"`
	AllowedCudaVersions []string  `json:"allowedCudaVersions"`
	CreatedAt           time.Time `json:"createdAt"`
	UpdatedAt           time.Time `json:"updatedAt"`
}

// IdleTimeoutApplies reports whether workers.idleTimeout means anything for the endpoint:
// not for a QUEUE endpoint scaling on REQUEST_COUNT (spec 2.3).
func (e *Endpoint) IdleTimeoutApplies() bool {
	return idleTimeoutApplies(e.Type, e.Scaling.Type)
}

func idleTimeoutApplies(t EndpointType, s ScalerType) bool {
	return !(t == TypeQueue && s == ScaleRequestCount)
}

// WorkersDraft holds the workers fields a request set; nil = omitted.
type WorkersDraft struct {
	Min, Max, IdleTimeout *int
}

// GPUDraft holds the gpu fields a request set; a nil Count = omitted.
type GPUDraft struct {
	Pools []string
	Count *int
}

// EndpointDraft is a create request as decoded, before defaults and the template: nil pointers
// and nil slices mean "omitted".
type EndpointDraft struct {
	Name                string
	Type                EndpointType
	GPU                 GPUDraft
	Scaling             Scaling
	TemplateID          string
	Image               *string
	Args                *string
	Disk                *int
	Ports               []string
	Env                 map[string]string
	RegistrySet         bool    // registry was present (possibly null)
	Registry            *string // nil with RegistrySet = explicit null
	Workers             *WorkersDraft
	DataCenterIDs       []string
	NetworkVolumes      []string
	TimeoutMs           *int64
	Flashboot           *Flashboot
	AllowedCudaVersions []string
}

// EndpointPatch is a partial update: nil = unchanged. GPU.Count nil keeps the current count;
// Workers fields merge one by one; Scaling, Ports, Env and the id lists replace whole values.
type EndpointPatch struct {
	Name                *string
	GPU                 *GPUDraft
	Scaling             *Scaling
	Image               *string
	Args                *string
	Disk                *int
	Ports               []string
	Env                 map[string]string
	RegistrySet         bool
	Registry            *string
	Workers             *WorkersDraft
	DataCenterIDs       []string
	NetworkVolumes      []string
	TimeoutMs           *int64
	Flashboot           *Flashboot
	AllowedCudaVersions []string
}

var (
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	cudaRE    = regexp.MustCompile(`^\d+\.\d+$`)
)

// checkRules applies every rule of spec 2.2-2.6 and 4.1 that is not a plain schema constraint,
// against the pools and data centers the catalog offers and the network volumes the endpoint
// may name (vols: the operator's and its owner's, by id). idleTimeoutGiven says whether the
// request itself set workers.idleTimeout. It returns all failures, in field order.
func checkRules(e *Endpoint, idleTimeoutGiven bool, cat *Catalog, vols map[string]Volume) []FieldError {
	errs := checkContainer(&e.Container, "is required unless templateId is set")
	add := func(path, format string, args ...any) {
		errs = append(errs, FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
	}

	// Pools: known, distinct, and able to hold gpu.count GPUs.
	pools := make([]PoolInfo, 0, len(e.GPU.Pools))
	for i, id := range e.GPU.Pools {
		path := fmt.Sprintf("$.gpu.pools[%d]", i)
		p, ok := cat.Pool(id)
		switch {
		case !ok:
			add(path, "unknown pool %q (see GET /v2/catalog/gpus)", id)
		case slices.Index(e.GPU.Pools, id) != i:
			add(path, "pool %q is listed twice", id)
		default:
			pools = append(pools, p)
		}
	}
	if len(pools) > 0 {
		largest := 0
		for _, p := range pools {
			largest = max(largest, cat.GPUsPerWorkerMax(p.ID))
		}
		if e.GPU.Count > largest {
			add("$.gpu.count", "%d GPUs per worker is more than any listed pool can give one worker (at most %d)", e.GPU.Count, largest)
		}
	}

	errs = append(errs, cat.checkImage(e.Image, pools)...) // its jobs would wait forever

	// Workers and scaling.
	if e.Workers.Min > e.Workers.Max {
		add("$.workers.min", "must not exceed workers.max (%d)", e.Workers.Max)
	}
	if e.Type == TypeLoadBalancer && e.Scaling.Type != ScaleRequestCount {
		add("$.scaling.type", "must be REQUEST_COUNT for a LOAD_BALANCER endpoint")
	}
	if idleTimeoutGiven && !idleTimeoutApplies(e.Type, e.Scaling.Type) {
		add("$.workers.idleTimeout", "does not apply to a QUEUE endpoint scaling on REQUEST_COUNT; omit it")
	}

	// Data centers: known, and at least one listed pool in them.
	for i, dc := range e.DataCenterIDs {
		if !cat.HasDataCenter(dc) {
			add(fmt.Sprintf("$.dataCenterIds[%d]", i), "unknown data center %q", dc)
		}
	}
	if len(e.DataCenterIDs) > 0 && len(pools) > 0 && !slices.ContainsFunc(pools, func(p PoolInfo) bool {
		return slices.Contains(e.DataCenterIDs, p.DataCenter)
	}) {
		add("$.dataCenterIds", "none of the listed pools is in these data centers")
	}

	// Network volumes: known (the operator's or the owner's own); they pin their data center.
	for i, id := range e.NetworkVolumes {
		v, ok := vols[id]
		path := fmt.Sprintf("$.networkVolumes[%d]", i)
		switch {
		case !ok:
			add(path, "unknown network volume %q", id)
		case len(pools) > 0 && !slices.ContainsFunc(pools, func(p PoolInfo) bool { return p.DataCenter == v.DataCenter }):
			add(path, "network volume %q is in data center %q, where no listed pool is", id, v.DataCenter)
		}
	}

	// CUDA versions: each must be exactly one the listed pools offer.
	var offered []string
	for _, p := range pools {
		for _, v := range p.CUDAVersions {
			if !slices.Contains(offered, v) {
				offered = append(offered, v)
			}
		}
	}
	for i, v := range e.AllowedCudaVersions {
		path := fmt.Sprintf("$.allowedCudaVersions[%d]", i)
		switch {
		case !cudaRE.MatchString(v):
			add(path, "%q does not match ^\\d+\\.\\d+$", v)
		case len(pools) > 0 && !slices.Contains(offered, v):
			if len(offered) == 0 {
				add(path, "CUDA %s is not offered: the listed pools have no CUDA", v)
			} else {
				add(path, "CUDA %s is not offered by the listed pools (offered: %s)", v, strings.Join(offered, ", "))
			}
		}
	}
	return errs
}

// checkContainer checks the container settings an endpoint or template carries.
func checkContainer(c *Container, imageMissing string) []FieldError {
	var errs []FieldError
	if c.Image == "" {
		errs = append(errs, FieldError{"$.image", imageMissing})
	}
	for i, p := range c.Ports {
		n, _, _ := strings.Cut(p, "/")
		if v, err := strconv.Atoi(n); err != nil || v < 1 || v > 65535 {
			errs = append(errs, FieldError{fmt.Sprintf("$.ports[%d]", i), fmt.Sprintf("port %q is not between 1 and 65535", n)})
		}
	}
	for _, k := range sortedKeys(c.Env) {
		if !envNameRE.MatchString(k) {
			errs = append(errs, FieldError{"$.env." + k, fmt.Sprintf("%q is not a valid environment variable name", k)})
		}
	}
	return append(errs, checkEnvPolicy(c.Env)...)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// RequestURLs returns the request URLs of an endpoint (spec 2.6), built on the public URL.
// For QUEUE: run, runSync, status, stream, cancel, retry, purgeQueue, health. For
// LOAD_BALANCER: base and health.
func RequestURLs(publicURL string, e *Endpoint) map[string]string {
	base := strings.TrimSuffix(publicURL, "/")
	v2 := base + "/v2/" + e.ID
	if e.Type == TypeLoadBalancer {
		return map[string]string{
			"base":   base + "/lb/" + e.ID,
			"health": v2 + "/health",
		}
	}
	return map[string]string{
		"run":        v2 + "/run",
		"runSync":    v2 + "/runsync",
		"status":     v2 + "/status/{job_id}",
		"stream":     v2 + "/stream/{job_id}",
		"cancel":     v2 + "/cancel/{job_id}",
		"retry":      v2 + "/retry/{job_id}",
		"purgeQueue": v2 + "/purge-queue",
		"health":     v2 + "/health",
	}
}
