package api

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"github.com/go-faster/jx"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// This file is the worker protocol: the routes a worker calls (job-take, job-stop, job-done,
// stream, ping), each authenticated by the worker's token.

type workerTokenKey struct{}

// worker authenticates a worker route: the token must be the one issued to this worker of
// this endpoint.
func (h *handler) worker(ctx context.Context, endpoint, worker string) error {
	switch v := ctx.Value(workerTokenKey{}).(type) {
	case workerAuthed: // preauthenticate checked the token against this route
		return nil
	case string:
		return h.cfg.Jobs.AuthWorker(ctx, v, endpoint, worker)
	}
	return h.cfg.Jobs.AuthWorker(ctx, "", endpoint, worker)
}

func workerJob(t core.Taken) oas.WorkerJob {
	wj := oas.WorkerJob{ID: t.ID, Input: jx.Raw(t.Input)}
	if len(t.S3Config) > 0 {
		var s3 oas.S3Config
		if s3.Decode(jx.DecodeBytes(t.S3Config)) == nil {
			wj.S3Config = oas.NewOptS3Config(s3)
		}
	}
	return wj
}

// WorkerJobTake implements job-take: a long poll for one job.
func (h *handler) WorkerJobTake(ctx context.Context, p oas.WorkerJobTakeParams) (oas.WorkerJobTakeRes, error) {
	if err := h.worker(ctx, p.EndpointId, p.WorkerId); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.TakeWait)
	defer cancel()
	jobs := h.cfg.Jobs.Take(ctx, p.EndpointId, p.WorkerId, 1)
	if len(jobs) == 0 {
		return &oas.WorkerJobTakeNoContent{}, nil
	}
	wj := workerJob(jobs[0])
	return &wj, nil
}

// WorkerJobTakeBatch implements job-take-batch.
func (h *handler) WorkerJobTakeBatch(ctx context.Context, p oas.WorkerJobTakeBatchParams) (oas.WorkerJobTakeBatchRes, error) {
	if err := h.worker(ctx, p.EndpointId, p.WorkerId); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.TakeWait)
	defer cancel()
	jobs := h.cfg.Jobs.Take(ctx, p.EndpointId, p.WorkerId, p.BatchSize.Or(1))
	if len(jobs) == 0 {
		return &oas.WorkerJobTakeBatchNoContent{}, nil
	}
	out := make(oas.WorkerJobTakeBatchOKApplicationJSON, len(jobs))
	for i, t := range jobs {
		out[i] = workerJob(t)
	}
	return &out, nil
}

// WorkerJobStop implements job-stop: a long poll for jobs the worker must stop.
func (h *handler) WorkerJobStop(ctx context.Context, p oas.WorkerJobStopParams) (oas.WorkerJobStopRes, error) {
	if err := h.worker(ctx, p.EndpointId, p.WorkerId); err != nil {
		return nil, err
	}
	ids := h.cfg.Jobs.JobsToStop(ctx, p.WorkerId, h.cfg.TakeWait)
	if len(ids) == 0 {
		return &oas.WorkerJobStopNoContent{}, nil
	}
	return &oas.JobsToStop{JobsToStop: ids}, nil
}

// WorkerJobDone implements job-done: result, error or progress.
func (h *handler) WorkerJobDone(ctx context.Context, req *oas.JobDoneRequest, p oas.WorkerJobDoneParams) (oas.WorkerJobDoneRes, error) {
	if err := h.worker(ctx, p.EndpointId, p.WorkerId); err != nil {
		return nil, err
	}
	r := core.Result{StopPod: req.StopPod.Or(false), Progress: req.Status.Or("") == string(core.InProgress)}
	if req.Output != nil && string(req.Output) != "null" {
		r.Output = json.RawMessage(req.Output)
	}
	if e := req.Error; e != nil && string(e) != "null" {
		var s string
		if json.Unmarshal(e, &s) == nil {
			r.Error = s
		} else {
			r.Error = string(e)
		}
		if strings.TrimSpace(r.Error) == "" {
			r.Error = "the worker reported an empty error"
		}
	}
	if err := h.cfg.Jobs.Done(ctx, p.EndpointId, p.WorkerId, p.JobId, r); err != nil {
		return nil, err
	}
	return &oas.WorkerAck{Status: "ok"}, nil
}

// WorkerJobStream implements job-stream: one streamed part.
func (h *handler) WorkerJobStream(ctx context.Context, req *oas.JobStreamRequest, p oas.WorkerJobStreamParams) (oas.WorkerJobStreamRes, error) {
	if err := h.worker(ctx, p.EndpointId, p.WorkerId); err != nil {
		return nil, err
	}
	part := json.RawMessage(req.Output)
	if part == nil {
		part = json.RawMessage("null")
	}
	var metrics json.RawMessage
	if m := bytes.TrimSpace(req.Metrics); len(m) > 0 && m[0] == '{' {
		metrics = json.RawMessage(m)
	}
	if err := h.cfg.Jobs.StreamPart(ctx, p.EndpointId, p.WorkerId, p.JobId, part, metrics); err != nil {
		return nil, err
	}
	return &oas.WorkerAck{Status: "ok"}, nil
}

// WorkerPing implements ping.
func (h *handler) WorkerPing(ctx context.Context, p oas.WorkerPingParams) (oas.WorkerPingRes, error) {
	if err := h.worker(ctx, p.EndpointId, p.WorkerId); err != nil {
		return nil, err
	}
	unhealthy := ""
	if p.Status.Or("") == "unhealthy" {
		unhealthy = strings.TrimSpace(p.Check.Or("startup check") + ": " + p.Reason.Or("no reason given"))
	}
	h.cfg.Jobs.PingJobs(ctx, p.WorkerId, unhealthy, p.JobID.Or(""))
	return &oas.WorkerAck{Status: "ok"}, nil
}
