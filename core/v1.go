package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// V1Draft is a create request of the older management API (spec 4.6); nil = omitted.
type V1Draft struct {
	Name                string
	TemplateID          string
	GPUTypeIDs          []string // in priority order
	GPUCount            *int
	WorkersMin          *int
	WorkersMax          *int
	IdleTimeout         *int
	ScalerType          *ScalerType
	ScalerValue         *float64
	Flashboot           *bool
	ExecutionTimeoutMs  *int64
	DataCenterIDs       []string
	NetworkVolumeID     *string
	AllowedCudaVersions []string
}

// DefaultV1QueueDelay is the queue delay (seconds) of a v1 endpoint that names no scaler value,
// RunPod's default.
const DefaultV1QueueDelay = 4

// CreateEndpointV1 translates an older create request onto CreateEndpoint: each GPU type id
// becomes the pools offering it, in the given priority order, so placement tries the first
// available type, then the next. Validation failures name the v1 fields.
func (m *Management) CreateEndpointV1(ctx context.Context, owner string, d V1Draft) (Endpoint, error) {
	var pools []string
	var errs []FieldError
	for i, gt := range d.GPUTypeIDs {
		found := false
		for _, p := range m.Catalog.Pools() {
			if p.GPUType == gt {
				found = true
				if !slices.Contains(pools, p.ID) {
					pools = append(pools, p.ID)
				}
			}
		}
		if !found {
			errs = append(errs, FieldError{fmt.Sprintf("$.gpuTypeIds[%d]", i), fmt.Sprintf("unknown GPU type %q (see GET /v2/catalog/gpus)", gt)})
		}
	}
	scaling := Scaling{Type: deref(d.ScalerType, ScaleQueueDelay)}
	switch value := deref(d.ScalerValue, 0); scaling.Type {
	case ScaleQueueDelay:
		scaling.QueueDelay = value
		if d.ScalerValue == nil {
			scaling.QueueDelay = DefaultV1QueueDelay
		}
	case ScaleRequestCount:
		scaling.RequestCount = int(value)
		if d.ScalerValue == nil {
			scaling.RequestCount = 1
		} else if value != float64(int(value)) || value < 1 {
			errs = append(errs, FieldError{"$.scalerValue", "must be a whole number of at least 1 for REQUEST_COUNT"})
		}
	}
	if len(errs) > 0 {
		return Endpoint{}, Invalid(errs...)
	}
	draft := EndpointDraft{
		Name:                d.Name,
		Type:                TypeQueue,
		GPU:                 GPUDraft{Pools: pools, Count: d.GPUCount},
		Scaling:             scaling,
		TemplateID:          d.TemplateID,
		Workers:             &WorkersDraft{Min: d.WorkersMin, Max: d.WorkersMax, IdleTimeout: d.IdleTimeout},
		DataCenterIDs:       d.DataCenterIDs,
		TimeoutMs:           d.ExecutionTimeoutMs,
		AllowedCudaVersions: d.AllowedCudaVersions,
	}
	if d.Flashboot != nil {
		fb := FlashbootOff
		if *d.Flashboot {
			fb = FlashbootOn
		}
		draft.Flashboot = &fb
	}
	if d.NetworkVolumeID != nil {
		draft.NetworkVolumes = []string{*d.NetworkVolumeID}
	}
	e, err := m.CreateEndpoint(ctx, owner, draft)
	var ce *Error
	if errors.As(err, &ce) && ce.Kind == KindInvalid {
		return Endpoint{}, Invalid(v1Paths(ce.Fields)...)
	}
	return e, err
}

// v1Paths renames the v2 paths of validation failures to the v1 fields they came from.
func v1Paths(fs []FieldError) []FieldError {
	renames := []struct{ v2, v1 string }{
		{"$.workers.min", "$.workersMin"},
		{"$.workers.max", "$.workersMax"},
		{"$.workers.idleTimeout", "$.idleTimeout"},
		{"$.gpu.count", "$.gpuCount"},
		{"$.gpu.pools", "$.gpuTypeIds"},
		{"$.scaling", "$.scalerType"},
		{"$.timeout", "$.executionTimeoutMs"},
		{"$.networkVolumes[0]", "$.networkVolumeId"},
		{"$.image", "$.templateId"},
	}
	out := slices.Clone(fs)
	for i, f := range out {
		for _, r := range renames {
			if strings.HasPrefix(f.Path, r.v2) {
				out[i].Path = r.v1
				if r.v2 == "$.image" {
					out[i].Message = "the template has no image"
				}
				break
			}
		}
	}
	return out
}

// V1GPUTypes returns the GPU type ids of an endpoint's pools, in pool order, without repeats.
func (m *Management) V1GPUTypes(e *Endpoint) []string {
	types := []string{}
	for _, id := range e.GPU.Pools {
		if p, ok := m.Catalog.Pool(id); ok && !slices.Contains(types, p.GPUType) {
			types = append(types, p.GPUType)
		}
	}
	return types
}
