package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Job is one job handed to the worker by job-take.
type Job struct {
	// ID is the job id the server assigned.
	ID string
	// Input is the job's "input" JSON as the client sent it; the JSON literal null when the
	// job has none.
	Input json.RawMessage
	// S3Config is the job's "s3Config" object as the client sent it; nil when it has none.
	S3Config json.RawMessage
}

// Responder lets a handler post progress and stream parts while it runs.
type Responder interface {
	// Progress posts v as a progress update: job-done with {"status":"IN_PROGRESS","output":v}.
	// The job keeps running; clients see v as the job's output while it is IN_PROGRESS.
	Progress(ctx context.Context, v any) error
	// Stream posts part as one stream chunk: job-stream with {"output":part}; a [Chunk] posts
	// its Output with its Metrics. Once a handler has streamed, its result is posted with
	// isStream=true and should be the aggregate of the parts.
	Stream(ctx context.Context, part any) error
	// PutFile stores a file the job produced on the platform: POST job-file with the bytes,
	// ext naming the format ("png", "gif" or "wav"). It returns the file's signed URL, which
	// expires, for the job's output. This is Gantry's extension of the protocol: RunPod has no
	// such route (the answer there is an error).
	PutFile(ctx context.Context, ext string, data []byte) (File, error)
}

// Chunk is a stream part with metrics (spec 2.9): Stream posts {"output":Output,
// "metrics":Metrics}, and stream readers get the metrics beside the part.
type Chunk struct {
	Output  any
	Metrics any
}

// File is a file stored with [Responder.PutFile].
type File struct {
	Name        string    `json:"name"`
	URL         string    `json:"url"` // signed; works until ExpiresAt, with no API key
	ExpiresAt   time.Time `json:"expiresAt"`
	Bytes       int64     `json:"bytes"`
	ContentType string    `json:"contentType"`
}

// Handler runs one job; the returned value becomes the output; a returned error fails the job
// with err.Error().
//
// The value is encoded with encoding/json (a json.RawMessage is sent as is); return a [Result]
// or *Result to ask the platform to recycle the worker after this job. ctx is cancelled when
// the server stops the job through job-stop (its cause is then [ErrStopped]) and when Run's
// context is done; the handler should return promptly then.
type Handler func(ctx context.Context, job *Job, r Responder) (any, error)

// Result is a handler's output with the request to recycle the worker after the job.
type Result struct {
	// Output is the job's output.
	Output any
	// StopPod asks the platform to recycle this worker after the job ("stopPod": true on
	// job-done). The worker takes no further jobs once the result is posted.
	StopPod bool
}

// ErrStopped is the cause (see context.Cause) of a job context cancelled because the server
// asked to stop the job through job-stop. Responder calls made for a stopped job return it.
var ErrStopped = errors.New("worker: job stopped by the server")

// errFinished is returned by Responder calls made after the handler returned.
var errFinished = errors.New("worker: job already finished")

// Run takes jobs and runs h on each until ctx is done, then returns nil. It returns an error
// at once only when cfg is invalid.
//
// When ctx is done Run stops polling, cancels the context of every running handler and waits
// for them; a handler that still returns a value then has its result posted (for at most 15 s),
// one that returns an error has nothing posted, so that the server re-queues the job. Run
// returns only after every goroutine it started has ended.
func Run(ctx context.Context, cfg Config, h Handler) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if h == nil {
		return errors.New("worker: nil Handler")
	}
	r := &runner{
		cfg:  cfg,
		h:    h,
		log:  cfg.Log.With("worker", cfg.WorkerID),
		jobs: make(map[string]*activeJob),
	}
	takeCtx, stopTaking := context.WithCancel(ctx)
	defer stopTaking()
	r.stopTaking = stopTaking

	r.log.Info("worker started; polling for jobs", "concurrency", cfg.Concurrency)
	var wg sync.WaitGroup
	wg.Go(func() { r.takeLoop(ctx, takeCtx) })
	if u := stopURL(cfg.TakeURL); u != "" {
		wg.Go(func() { r.stopLoop(ctx, u) })
	} else {
		r.log.Warn("no /job-take/ segment in the job-take URL; job-stop is not polled", "url", cfg.TakeURL)
	}
	if cfg.PingURL != "" {
		wg.Go(func() { r.pingLoop(ctx) })
	}
	<-ctx.Done()
	wg.Wait()
	return nil
}

// runner is the state of one Run.
type runner struct {
	cfg        Config
	h          Handler
	log        *slog.Logger
	stopTaking context.CancelFunc // called after a stopPod result

	mu         sync.Mutex
	jobs       map[string]*activeJob // in progress, by id
	earlyStops []string              // ids named by job-stop before their job was taken (bounded)
}

// activeJob is a job whose handler runs or whose result is being posted.
type activeJob struct {
	cancel  context.CancelCauseFunc
	stopped atomic.Bool // job-stop named it: post nothing
}

// maxEarlyStops bounds runner.earlyStops.
const maxEarlyStops = 64

// takeLoop takes jobs and runs them, Concurrency at a time, until takeCtx is done, as the
// runpod SDK's job scaler works: one long-poll at a time asks for as many jobs as there are
// free slots (job-take for one, job-take-batch with batch_size for more), and each job runs on
// its own goroutine under runCtx, so that a stopPod result stops the polling but not a running
// job. It returns when takeCtx is done and the jobs it started have ended.
func (r *runner) takeLoop(runCtx, takeCtx context.Context) {
	n := r.cfg.Concurrency
	slots := make(chan struct{}, n) // a token per free slot
	for range n {
		slots <- struct{}{}
	}
	var running sync.WaitGroup
	defer running.Wait()
	var bo backoff
	for {
		select {
		case <-slots:
		case <-takeCtx.Done():
			return
		}
		free := 1
	gather:
		for free < n {
			select {
			case <-slots:
				free++
			default:
				break gather
			}
		}
		if takeCtx.Err() != nil { // a stopPod result ended the taking while a slot freed
			return
		}
		jobs, err := r.takeN(takeCtx, free)
		if len(jobs) > free {
			r.log.Error("job-take-batch answered more jobs than asked for; running the first ones", "asked", free, "got", len(jobs))
			jobs = jobs[:free]
		}
		for range free - len(jobs) {
			slots <- struct{}{}
		}
		for _, job := range jobs {
			running.Go(func() {
				defer func() { slots <- struct{}{} }()
				r.runJob(runCtx, job)
			})
		}
		if err != nil {
			r.takeFailed(takeCtx, err, &bo)
		} else {
			bo.reset()
		}
	}
}

// takeFailed waits as a failed job-take asks: nothing after the poll outlived its own timeout
// once, a throttle delay after a 429, a growing backoff otherwise.
func (r *runner) takeFailed(takeCtx context.Context, err error, bo *backoff) {
	switch {
	case takeCtx.Err() != nil:
	case errors.Is(err, errThrottled):
		r.log.Warn("job-take throttled", "retry_in", throttleDelay)
		_ = r.cfg.sleep(takeCtx, throttleDelay)
	case errors.Is(err, context.DeadlineExceeded) && bo.cur == 0:
		// The poll outlived its own timeout: the worker was suspended (FLASHBOOT pauses it
		// mid-poll) or something held the request. Ask again at once; a second failure in a
		// row backs off.
		bo.next()
	default:
		d := bo.next()
		r.log.Warn("job-take failed", "err", err, "retry_in", d)
		_ = r.cfg.sleep(takeCtx, d)
	}
}

// errThrottled is job-take's 429.
var errThrottled = errors.New("job-take: HTTP 429 Too Many Requests")

// take makes one job-take long-poll. It returns a nil job when the server has none.
func (r *runner) take(ctx context.Context) (*Job, error) {
	body, err := r.poll(ctx, "job-take", r.cfg.TakeURL)
	if body == nil {
		return nil, err
	}
	job, err := decodeJob(body)
	if err != nil {
		return nil, fmt.Errorf("job-take: %w", err)
	}
	return job, nil
}

// poll makes one job-take or job-take-batch long-poll at u, with job_in_progress appended,
// and returns the answer's body: nil when the server had no job.
func (r *runner) poll(ctx context.Context, op, u string) ([]byte, error) {
	inProgress := "0"
	if r.inProgress() > 0 {
		inProgress = "1"
	}
	code, body, err := r.get(ctx, op, withQuery(u, "job_in_progress="+inProgress), pollTimeout)
	switch {
	case err != nil:
		return nil, err
	case code == 204:
		return nil, nil
	case code == 429:
		return nil, errThrottled
	}
	return body, nil
}

// takeN asks for up to n jobs: job-take for one, job-take-batch with batch_size=n for more (a
// take URL without a /job-take/ segment has no batch form: it asks for one).
func (r *runner) takeN(ctx context.Context, n int) ([]*Job, error) {
	u := batchURL(r.cfg.TakeURL)
	if n == 1 || u == "" {
		job, err := r.take(ctx)
		if job == nil {
			return nil, err
		}
		return []*Job{job}, nil
	}
	body, err := r.poll(ctx, "job-take-batch", withQuery(u, "batch_size="+strconv.Itoa(n)))
	if body == nil {
		return nil, err
	}
	return decodeJobs(body)
}

// decodeJobs decodes a job-take-batch answer: a JSON array of jobs (a single job object is
// taken as a batch of one).
func decodeJobs(b []byte) ([]*Job, error) {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		job, err := decodeJob(b)
		if err != nil {
			return nil, fmt.Errorf("job-take-batch: %w", err)
		}
		return []*Job{job}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(b, &raws); err != nil {
		return nil, fmt.Errorf("job-take-batch: decoding the jobs: %w", err)
	}
	jobs := make([]*Job, 0, len(raws))
	for _, raw := range raws {
		job, err := decodeJob(raw)
		if err != nil {
			return jobs, fmt.Errorf("job-take-batch: %w", err)
		}
		jobs = append(jobs, job)
	}
	return jobs, nil
}

// decodeJob decodes a job-take answer: a JSON object with at least "id".
func decodeJob(b []byte) (*Job, error) {
	var w struct {
		ID       string          `json:"id"`
		Input    json.RawMessage `json:"input"`
		S3Config json.RawMessage `json:"s3Config"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("decoding the job: %w", err)
	}
	if w.ID == "" {
		return nil, errors.New("decoding the job: no \"id\"")
	}
	if len(w.Input) == 0 {
		w.Input = json.RawMessage("null")
	}
	if string(w.S3Config) == "null" {
		w.S3Config = nil
	}
	return &Job{ID: w.ID, Input: w.Input, S3Config: w.S3Config}, nil
}

// inProgress returns the number of jobs in progress.
func (r *runner) inProgress() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.jobs)
}

// register records job id as in progress and returns its context. It returns a nil activeJob
// when the job must not run: it is already in progress, or job-stop named it before.
func (r *runner) register(ctx context.Context, id string) (*activeJob, context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.jobs[id]; dup {
		r.log.Error("job-take handed out a job already in progress; ignoring it", "job", id)
		return nil, nil
	}
	if i := slices.Index(r.earlyStops, id); i >= 0 {
		r.earlyStops = slices.Delete(r.earlyStops, i, i+1)
		r.log.Info("job stopped by the server before it started", "job", id)
		return nil, nil
	}
	jobCtx, cancel := context.WithCancelCause(ctx)
	j := &activeJob{cancel: cancel}
	r.jobs[id] = j
	return j, jobCtx
}

// unregister forgets job id.
func (r *runner) unregister(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j, ok := r.jobs[id]; ok {
		j.cancel(nil)
		delete(r.jobs, id)
	}
}

// stop cancels the jobs named by job-stop; ids not in progress are remembered in case their
// job-take answer is still on its way.
func (r *runner) stop(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if j, ok := r.jobs[id]; ok {
			if !j.stopped.Swap(true) {
				r.log.Info("job stopped by the server", "job", id)
			}
			j.cancel(ErrStopped)
			continue
		}
		if !slices.Contains(r.earlyStops, id) {
			r.earlyStops = append(r.earlyStops, id)
			if n := len(r.earlyStops); n > maxEarlyStops {
				r.earlyStops = slices.Delete(r.earlyStops, 0, n-maxEarlyStops)
			}
		}
	}
}

// runningIDs returns the ids of the jobs in progress, sorted.
func (r *runner) runningIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.jobs))
	for id := range r.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// runJob runs the handler on job and posts its result.
func (r *runner) runJob(runCtx context.Context, job *Job) {
	j, jobCtx := r.register(runCtx, job.ID)
	if j == nil {
		return
	}
	defer r.unregister(job.ID)
	log := r.log.With("job", job.ID)
	log.Info("job taken")
	start := time.Now()
	resp := &responder{r: r, job: j, id: job.ID}
	out, herr := r.call(jobCtx, job, resp, log)
	resp.finished.Store(true)

	switch {
	case j.stopped.Load():
		log.Info("job stopped; posting nothing", "took", time.Since(start))
		return
	case herr != nil && runCtx.Err() != nil:
		log.Info("job interrupted by shutdown; posting nothing", "err", herr)
		return
	}
	body, stopPod := encodeDone(out, herr)
	postCtx := runCtx
	if runCtx.Err() != nil {
		var cancel context.CancelFunc
		postCtx, cancel = context.WithTimeout(context.WithoutCancel(runCtx), finalTimeout)
		defer cancel()
	}
	isStream := "false"
	if resp.streamed.Load() {
		isStream = "true"
	}
	u := withQuery(jobURL(r.cfg.DoneURL, job.ID), "isStream="+isStream)
	if err := r.post(postCtx, "job-done", u, body); err != nil {
		log.Error("posting the job's result failed; result dropped", "err", err)
		return
	}
	if herr != nil {
		log.Info("job failed", "err", herr, "took", time.Since(start))
	} else {
		log.Info("job done", "took", time.Since(start))
	}
	if stopPod {
		log.Info("stopPod requested; taking no further jobs")
		r.stopTaking()
	}
}

// call runs the handler, turning a panic into an error.
func (r *runner) call(ctx context.Context, job *Job, resp Responder, log *slog.Logger) (out any, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("handler panicked", "panic", p, "stack", string(debug.Stack()))
			out, err = nil, fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return r.h(ctx, job, resp)
}

// encodeDone builds the job-done body for a handler's result and reports whether it asks for
// the worker to be recycled.
func encodeDone(out any, herr error) (body []byte, stopPod bool) {
	switch res := out.(type) {
	case Result:
		out, stopPod = res.Output, res.StopPod
	case *Result:
		if res != nil {
			out, stopPod = res.Output, res.StopPod
		} else {
			out = nil
		}
	}
	if herr == nil {
		b, err := marshal(struct {
			Output  any  `json:"output"`
			StopPod bool `json:"stopPod,omitempty"`
		}{out, stopPod})
		if err == nil {
			return b, stopPod
		}
		herr = fmt.Errorf("encoding the output: %w", err)
	}
	msg := herr.Error()
	if msg == "" {
		msg = "handler failed"
	}
	b, _ := marshal(struct {
		Error   string `json:"error"`
		StopPod bool   `json:"stopPod,omitempty"`
	}{msg, stopPod})
	return b, stopPod
}

// marshal encodes v as JSON without HTML escaping and without a trailing newline.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// responder is the Responder of one job.
type responder struct {
	r        *runner
	job      *activeJob
	id       string
	streamed atomic.Bool // Stream was called
	finished atomic.Bool // the handler returned
}

// Progress implements Responder.
func (p *responder) Progress(ctx context.Context, v any) error {
	if err := p.check(); err != nil {
		return err
	}
	body, err := marshal(struct {
		Status string `json:"status"`
		Output any    `json:"output"`
	}{"IN_PROGRESS", v})
	if err != nil {
		return fmt.Errorf("worker: encoding the progress update: %w", err)
	}
	return p.r.post(ctx, "job-done", jobURL(p.r.cfg.DoneURL, p.id), body)
}

// Stream implements Responder.
func (p *responder) Stream(ctx context.Context, part any) error {
	if err := p.check(); err != nil {
		return err
	}
	if p.r.cfg.StreamURL == "" {
		return errors.New("worker: no job-stream URL configured")
	}
	p.streamed.Store(true)
	var msg any = struct {
		Output any `json:"output"`
	}{part}
	switch c := part.(type) {
	case Chunk:
		msg = chunkBody(c)
	case *Chunk:
		if c != nil {
			msg = chunkBody(*c)
		}
	}
	body, err := marshal(msg)
	if err != nil {
		return fmt.Errorf("worker: encoding the stream part: %w", err)
	}
	return p.r.post(ctx, "job-stream", withQuery(jobURL(p.r.cfg.StreamURL, p.id), "isStream=false"), body)
}

// chunkBody is the job-stream body of a Chunk.
type chunkBody struct {
	Output  any `json:"output"`
	Metrics any `json:"metrics,omitempty"`
}

// PutFile implements Responder.
func (p *responder) PutFile(ctx context.Context, ext string, data []byte) (File, error) {
	if err := p.check(); err != nil {
		return File{}, err
	}
	if p.r.cfg.FileURL == "" {
		return File{}, errors.New("worker: no job-file URL configured (derived from a job-done URL with /job-done/)")
	}
	var f File
	u := withQuery(jobURL(p.r.cfg.FileURL, p.id), "ext="+url.QueryEscape(ext))
	if err := p.r.postFile(ctx, u, data, &f); err != nil {
		return File{}, fmt.Errorf("worker: storing the %s file: %w", ext, err)
	}
	return f, nil
}

// check refuses posts for a job that was stopped or has finished.
func (p *responder) check() error {
	switch {
	case p.job.stopped.Load():
		return ErrStopped
	case p.finished.Load():
		return errFinished
	}
	return nil
}

// stopLoop long-polls job-stop at u until ctx is done.
func (r *runner) stopLoop(ctx context.Context, u string) {
	var bo backoff
	for ctx.Err() == nil {
		code, body, err := r.get(ctx, "job-stop", u, pollTimeout)
		if err == nil && code == 429 {
			err = &StatusError{Op: "job-stop", Code: code}
		}
		if err == nil && code == 200 {
			var w struct {
				JobsToStop []string `json:"jobsToStop"`
			}
			if derr := json.Unmarshal(body, &w); derr != nil {
				err = fmt.Errorf("job-stop: decoding the answer: %w", derr)
			} else {
				r.stop(w.JobsToStop)
			}
		}
		switch {
		case err == nil:
			bo.reset()
		case ctx.Err() != nil:
			return
		default:
			d := bo.next()
			r.log.Warn("job-stop failed", "err", err, "retry_in", d)
			_ = r.cfg.sleep(ctx, d)
		}
	}
}

// pingLoop pings at once and then every PingInterval until ctx is done.
func (r *runner) pingLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.PingInterval)
	defer t.Stop()
	for {
		if err := r.ping(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("ping failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ping sends one ping naming the jobs in progress.
func (r *runner) ping(ctx context.Context) error {
	var q strings.Builder
	if ids := r.runningIDs(); len(ids) > 0 {
		q.WriteString("job_id=")
		for i, id := range ids {
			if i > 0 {
				q.WriteByte(',')
			}
			q.WriteString(url.QueryEscape(id))
		}
		q.WriteByte('&')
	}
	q.WriteString("runpod_version=gantry")
	_, _, err := r.get(ctx, "ping", withQuery(r.cfg.PingURL, q.String()), max(2*r.cfg.PingInterval, minPingTimeout))
	return err
}

var _ Responder = (*responder)(nil)
