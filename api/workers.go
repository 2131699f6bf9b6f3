package api

import (
	"bytes"
	"context"
	"io"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// DefaultLogTail is how many lines of a worker's output getWorkerLogs returns by default.
const DefaultLogTail = 200

// ListWorkers implements listWorkers (worker visibility).
func (h *handler) ListWorkers(ctx context.Context, p oas.ListWorkersParams) (oas.ListWorkersRes, error) {
	ep, err := h.mgmt().GetEndpoint(ctx, principalOf(ctx).User, p.EndpointId)
	if err != nil {
		return nil, err
	}
	out := oas.WorkerList{Items: []oas.WorkerInfo{}}
	if h.cfg.Fleet == nil {
		return &oas.WorkerListHeaders{Response: out}, nil
	}
	for _, w := range h.cfg.Fleet.EndpointWorkers(ep.ID) {
		i := oas.WorkerInfo{ID: w.ID, Status: oas.WorkerInfoStatus(w.Status), Pool: w.Pool, Gpus: w.GPUs,
			StartedAt: w.StartedAt.UTC(), Jobs: oas.NewOptInt(w.Jobs)}
		if i.Gpus == nil {
			i.Gpus = []int{}
		}
		if w.ColdStart > 0 {
			i.ColdStartMs = oas.NewOptInt64(w.ColdStart.Milliseconds())
		}
		if !w.ExitedAt.IsZero() {
			i.ExitedAt = oas.NewOptDateTime(w.ExitedAt.UTC())
		}
		if w.Error != "" {
			i.Error = oas.NewOptString(w.Error)
		}
		out.Items = append(out.Items, i)
	}
	return &oas.WorkerListHeaders{Response: out}, nil
}

// GetWorkerLogs implements getWorkerLogs: the last lines of a worker's output.
func (h *handler) GetWorkerLogs(ctx context.Context, p oas.GetWorkerLogsParams) (oas.GetWorkerLogsRes, error) {
	ep, err := h.mgmt().GetEndpoint(ctx, principalOf(ctx).User, p.EndpointId)
	if err != nil {
		return nil, err
	}
	if h.cfg.Fleet == nil {
		return nil, core.Errorf(core.KindNotFound, "endpoint %s has no worker %s", ep.ID, p.WorkerId)
	}
	rc, err := h.cfg.Fleet.WorkerLogs(ctx, ep.ID, p.WorkerId, p.Tail.Or(DefaultLogTail))
	if err != nil {
		return nil, err
	}
	// ogen copies the reader into the response and does not close it: read it here (it is
	// bounded by the tail) so the pool's file or stream is closed.
	defer func() { _ = rc.Close() }()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, core.Internal("reading worker logs", err)
	}
	return &oas.GetWorkerLogsOKHeaders{Response: oas.GetWorkerLogsOK{Data: bytes.NewReader(b)}}, nil
}
