package api

import (
	"bytes"
	"context"
	"time"

	"github.com/go-faster/jx"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// Long-poll bounds.
const (
	DefaultTakeWait = 30 * time.Second // job-take and job-stop hold this long before 204
	StreamWait      = 2 * time.Second  // /stream holds this long for a chunk while the job runs
)

// jobTarget is the endpoint a job operation addresses, as the caller may use it.
type jobTarget struct {
	ep     *core.Endpoint
	caller string
	shared bool // a ready-made model's platform endpoint: the caller sees only their own jobs
}

// ref names a job of the target for the caller: any job of their own endpoint, only their own
// jobs on a shared one.
func (t jobTarget) ref(id string) core.JobRef {
	r := core.JobRef{Endpoint: t.ep.ID, ID: id}
	if t.shared {
		r.Owner = t.caller
	}
	return r
}

// jobEndpoint resolves the QUEUE endpoint of a job operation for the caller.
func (h *handler) jobEndpoint(ctx context.Context, id string) (jobTarget, error) {
	t, err := h.anyEndpoint(ctx, id)
	if err == nil && t.ep.Type != core.TypeQueue {
		return jobTarget{}, core.Errorf(core.KindConflict, "endpoint %q is a LOAD_BALANCER endpoint: it has no job queue", t.ep.ID)
	}
	return t, err
}

// anyEndpoint resolves the endpoint of an operation both kinds of endpoint have (health): the
// caller's own endpoint or a ready-made model's (by its slug); another user's endpoint is not
// found; a jobs key limited to other endpoints is forbidden.
func (h *handler) anyEndpoint(ctx context.Context, id string) (jobTarget, error) {
	p := principalOf(ctx)
	ep, shared, err := h.mgmt().JobEndpoint(ctx, p.User, id)
	if err != nil {
		return jobTarget{}, err
	}
	if !p.AllowsEndpoint(ep.ID) {
		return jobTarget{}, core.Errorf(core.KindForbidden, "this key may not use endpoint %q", ep.ID)
	}
	return jobTarget{ep: &ep, caller: p.User, shared: shared}, nil
}

func (h *handler) submit(ctx context.Context, req *oas.JobRequest, endpointID string, sync bool, wait time.Duration) (core.Job, error) {
	t, err := h.jobEndpoint(ctx, endpointID)
	if err != nil {
		return core.Job{}, err
	}
	ep := t.ep
	if in := takeInput(ctx); in != nil { // ServeHTTP lifted it out of the body (input.go)
		req.Input = in
	}
	// input is kept byte for byte (x-ogen-type RawMessage), so its object type is checked here.
	if in := bytes.TrimSpace(req.Input); len(in) == 0 || in[0] != '{' {
		return core.Job{}, core.Invalid(core.FieldError{Path: "$.input", Message: "must be a JSON object"})
	}
	if t.shared { // a ready-made model: its parameters are known, so check them now
		if m, ok := h.cfg.Models.Get(ep.ID); ok {
			if err := m.CheckInput(req.Input); err != nil {
				return core.Job{}, err
			}
		}
	}
	s := core.Submission{Owner: t.caller, Input: req.Input, Sync: sync, Wait: wait}
	if s3, ok := req.S3Config.Get(); ok {
		e := jx.Encoder{}
		s3.Encode(&e)
		s.S3Config = e.Bytes()
	}
	if u, ok := req.Webhook.Get(); ok {
		if err := h.cfg.Webhooks.CheckURL(u); err != nil {
			return core.Job{}, err
		}
		s.Webhook = u
	}
	if p, ok := req.Policy.Get(); ok {
		s.Policy = core.JobPolicy{ExecutionTimeoutMs: p.ExecutionTimeout.Or(0), LowPriority: p.LowPriority.Or(false), TTLMs: p.TTL.Or(0)}
	}
	return h.cfg.Jobs.Submit(ctx, ep, s) // ctx carries the request's span: the job's spans join its trace
}

// RunJob implements run (spec 4.3).
func (h *handler) RunJob(ctx context.Context, req *oas.JobRequest, params oas.RunJobParams) (oas.RunJobRes, error) {
	j, err := h.submit(ctx, req, params.EndpointId, false, 0)
	if err != nil {
		return nil, err
	}
	return &oas.JobAckHeaders{Response: oas.JobAck{ID: j.ID, Status: oas.JobStatus(j.Status)}}, nil
}

// RunSyncJob implements runsync: the job when it ends within wait, else its current status.
func (h *handler) RunSyncJob(ctx context.Context, req *oas.JobRequest, params oas.RunSyncJobParams) (oas.RunSyncJobRes, error) {
	wait := time.Duration(params.Wait.Or(90000)) * time.Millisecond
	j, err := h.submit(ctx, req, params.EndpointId, true, wait)
	if err != nil {
		return nil, err
	}
	releaseBody(ctx)                                                                 // the job has the input; the wait below must not hold two more copies
	j, err = h.cfg.Jobs.Wait(ctx, core.JobRef{Endpoint: j.Endpoint, ID: j.ID}, wait) // the caller's own job
	if err != nil {
		return nil, err
	}
	return &oas.JobHeaders{Response: h.job(&j)}, nil
}

func (h *handler) status(ctx context.Context, endpointID, jobID string, ttl int64, wait time.Duration) (*oas.JobHeaders, error) {
	if err := mayChangeTTL(ctx, ttl); err != nil {
		return nil, err
	}
	t, err := h.jobEndpoint(ctx, endpointID)
	if err != nil {
		return nil, err
	}
	var j core.Job
	if wait > 0 {
		j, err = h.cfg.Jobs.Wait(ctx, t.ref(jobID), wait)
	} else {
		j, err = h.cfg.Jobs.Get(ctx, t.ref(jobID), time.Duration(ttl)*time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	if wait > 0 && ttl > 0 {
		j, err = h.cfg.Jobs.Get(ctx, t.ref(jobID), time.Duration(ttl)*time.Millisecond)
		if err != nil {
			return nil, err
		}
	}
	return &oas.JobHeaders{Response: h.job(&j)}, nil
}

// mayChangeTTL refuses a status ttl (it changes how long the job is kept, and a short one
// removes it) to a key whose scope may only read jobs.
func mayChangeTTL(ctx context.Context, ttl int64) error {
	if p := principalOf(ctx); ttl != 0 && p != nil && !p.Allows(core.JobWrite) {
		return core.Errorf(core.KindForbidden, "this key's scope %q may read a job's status but not change its ttl (it needs scope all or jobs)", p.Scope)
	}
	return nil
}

// GetJobStatus implements status.
func (h *handler) GetJobStatus(ctx context.Context, p oas.GetJobStatusParams) (oas.GetJobStatusRes, error) {
	return h.status(ctx, p.EndpointId, p.JobId, p.TTL.Or(0), 0)
}

// PostJobStatus implements status by POST.
func (h *handler) PostJobStatus(ctx context.Context, p oas.PostJobStatusParams) (oas.PostJobStatusRes, error) {
	return h.status(ctx, p.EndpointId, p.JobId, p.TTL.Or(0), 0)
}

// GetJobStatusSync implements status-sync.
func (h *handler) GetJobStatusSync(ctx context.Context, p oas.GetJobStatusSyncParams) (oas.GetJobStatusSyncRes, error) {
	return h.status(ctx, p.EndpointId, p.JobId, p.TTL.Or(0), time.Duration(p.Wait.Or(90000))*time.Millisecond)
}

// PostJobStatusSync implements status-sync by POST.
func (h *handler) PostJobStatusSync(ctx context.Context, p oas.PostJobStatusSyncParams) (oas.PostJobStatusSyncRes, error) {
	return h.status(ctx, p.EndpointId, p.JobId, p.TTL.Or(0), time.Duration(p.Wait.Or(90000))*time.Millisecond)
}

// stream reads a job's stream: it takes the chunks it returns, or with peek takes nothing and
// returns the chunks numbered after after, each with its seq (the console's read).
func (h *handler) stream(ctx context.Context, endpointID, jobID string, peek bool, after int64) (*oas.StreamResponseHeaders, error) {
	t, err := h.jobEndpoint(ctx, endpointID)
	if err != nil {
		return nil, err
	}
	var j core.Job
	var chunks []core.StreamChunk
	if peek {
		j, chunks, err = h.cfg.Jobs.PeekStream(ctx, t.ref(jobID), after)
	} else {
		j, chunks, err = h.cfg.Jobs.ReadStream(ctx, t.ref(jobID), StreamWait)
	}
	if err != nil {
		return nil, err
	}
	out := oas.StreamResponse{Status: oas.JobStatus(j.Status), Stream: make([]oas.StreamChunk, len(chunks))}
	for i, c := range chunks {
		out.Stream[i] = oas.StreamChunk{Output: jx.Raw(c.Output)}
		if peek {
			out.Stream[i].Seq = oas.NewOptInt64(c.Seq)
		}
		if len(c.Metrics) > 0 {
			var m oas.StreamMetrics
			if m.Decode(jx.DecodeBytes(c.Metrics)) == nil {
				out.Stream[i].Metrics = oas.NewOptStreamMetrics(m)
			}
		}
	}
	if j.Error != "" {
		out.Error = oas.NewOptString(j.Error)
	}
	return &oas.StreamResponseHeaders{Response: out}, nil
}

// GetJobStream implements stream.
func (h *handler) GetJobStream(ctx context.Context, p oas.GetJobStreamParams) (oas.GetJobStreamRes, error) {
	return h.stream(ctx, p.EndpointId, p.JobId, p.Peek.Or(false), p.After.Or(0))
}

// PostJobStream implements stream by POST.
func (h *handler) PostJobStream(ctx context.Context, p oas.PostJobStreamParams) (oas.PostJobStreamRes, error) {
	return h.stream(ctx, p.EndpointId, p.JobId, p.Peek.Or(false), p.After.Or(0))
}

// CancelJob implements cancel.
func (h *handler) CancelJob(ctx context.Context, p oas.CancelJobParams) (oas.CancelJobRes, error) {
	t, err := h.jobEndpoint(ctx, p.EndpointId)
	if err != nil {
		return nil, err
	}
	j, err := h.cfg.Jobs.Cancel(ctx, t.ref(p.JobId))
	if err != nil {
		return nil, err
	}
	return &oas.JobAckHeaders{Response: oas.JobAck{ID: j.ID, Status: oas.JobStatus(j.Status)}}, nil
}

// RetryJob implements retry.
func (h *handler) RetryJob(ctx context.Context, p oas.RetryJobParams) (oas.RetryJobRes, error) {
	t, err := h.jobEndpoint(ctx, p.EndpointId)
	if err != nil {
		return nil, err
	}
	j, err := h.cfg.Jobs.Retry(ctx, t.ref(p.JobId))
	if err != nil {
		return nil, err
	}
	return &oas.JobAckHeaders{Response: oas.JobAck{ID: j.ID, Status: oas.JobStatus(j.Status)}}, nil
}

// PurgeQueue implements purge-queue.
func (h *handler) PurgeQueue(ctx context.Context, p oas.PurgeQueueParams) (oas.PurgeQueueRes, error) {
	t, err := h.jobEndpoint(ctx, p.EndpointId)
	if err != nil {
		return nil, err
	}
	owner := ""
	if t.shared {
		owner = t.caller // a model's queue is shared: purge only the caller's jobs
	}
	n := h.cfg.Jobs.PurgeOwned(ctx, t.ep.ID, owner)
	return &oas.PurgeResponseHeaders{Response: oas.PurgeResponse{Removed: n, Status: "completed"}}, nil
}

// GetHealth implements health.
func (h *handler) GetHealth(ctx context.Context, p oas.GetHealthParams) (oas.GetHealthRes, error) {
	t, err := h.anyEndpoint(ctx, p.EndpointId)
	if err != nil {
		return nil, err
	}
	hl := h.cfg.Jobs.Health(ctx, t.ep.ID)
	out := oas.Health{
		Jobs: oas.HealthJobs{Completed: int(hl.Completed), Failed: int(hl.Failed), InProgress: int(hl.InProgress),
			InQueue: int(hl.InQueue), Retried: int(hl.Retried)},
		Workers: oas.HealthWorkers{Idle: hl.Idle, Running: hl.Running, Initializing: oas.NewOptInt(hl.Initializing),
			Unhealthy: oas.NewOptInt(hl.Unhealthy), Throttled: oas.NewOptInt(hl.Throttled), Suspended: oas.NewOptInt(hl.Suspended)},
	}
	if hl.ColdStarts > 0 {
		out.ColdStarts = oas.NewOptHealthColdStarts(oas.HealthColdStarts{Count: hl.ColdStarts,
			LastMs: oas.NewOptInt64(hl.ColdStartLast.Milliseconds()),
			MeanMs: oas.NewOptInt64((hl.ColdStartTotal / time.Duration(hl.ColdStarts)).Milliseconds())})
	}
	if hl.Reason != "" {
		out.Reason = oas.NewOptString(hl.Reason)
	}
	return &oas.HealthHeaders{Response: out}, nil
}

// job renders a job (spec 2.9 plus RunPod's error, retries and workerId).
func (h *handler) job(j *core.Job) oas.Job {
	now := h.cfg.Clock.Now()
	out := oas.Job{ID: j.ID, Status: oas.JobStatus(j.Status),
		DelayTime: oas.NewOptInt64(j.DelayTime(now)), ExecutionTime: oas.NewOptInt64(j.ExecutionTime(now)),
		Retries: oas.NewOptInt(j.Retries)}
	if j.Output != nil {
		out.Output = jx.Raw(j.Output)
	}
	if j.Error != "" {
		out.Error = oas.NewOptString(j.Error)
	}
	if j.Reason != "" {
		out.Reason = oas.NewOptString(j.Reason)
	}
	if j.WorkerID != "" {
		out.WorkerId = oas.NewOptString(j.WorkerID)
	}
	if j.Cost != nil {
		out.Cost = oas.NewOptJobCost(cost(j.Cost))
	}
	return out
}

// ListJobs implements listJobs: the endpoint's jobs newest first, as status may see them.
func (h *handler) ListJobs(ctx context.Context, params oas.ListJobsParams) (oas.ListJobsRes, error) {
	t, err := h.jobEndpoint(ctx, params.EndpointId)
	if err != nil {
		return nil, err
	}
	var status core.StatusSet
	for _, s := range params.Status {
		status |= core.Statuses(core.JobStatus(s))
	}
	page, err := h.cfg.Jobs.List(ctx, t.ref(""), status, params.Cursor.Or(""), params.Limit.Or(50))
	if err != nil {
		return nil, err
	}
	now := h.cfg.Clock.Now()
	out := oas.JobList{Items: make([]oas.JobSummary, len(page.Jobs))}
	for i := range page.Jobs {
		j := &page.Jobs[i]
		out.Items[i] = oas.JobSummary{ID: j.ID, Status: oas.JobStatus(j.Status), CreatedAt: j.CreatedAt,
			DelayTime: oas.NewOptInt64(j.DelayTime(now)), ExecutionTime: oas.NewOptInt64(j.ExecutionTime(now)),
			Retries: oas.NewOptInt(j.Retries)}
		if j.WorkerID != "" {
			out.Items[i].WorkerId = oas.NewOptString(j.WorkerID)
		}
	}
	if page.Next != "" {
		out.NextCursor = oas.NewOptString(page.Next)
	}
	return &oas.JobListHeaders{Response: out}, nil
}
