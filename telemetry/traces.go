package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/gantryhq/gantry/core"
)

// TraceConfig configures trace export. The zero value exports nothing (no tracer is built
// and the API keeps its no-op telemetry).
type TraceConfig struct {
	// OTLPEndpoint is the base URL of an OTLP/HTTP receiver, e.g. "http://127.0.0.1:4318";
	// spans are posted to its /v1/traces. "" = traces are off.
	OTLPEndpoint string `yaml:"otlpEndpoint"`
	// ServiceName names this server in the traces; "" = "gantry".
	ServiceName string `yaml:"serviceName"`
	// SampleRatio is the share of new traces kept, 0 < r <= 1; 0 = 1 (every trace). A request
	// that carries a traceparent follows its caller's choice.
	SampleRatio float64 `yaml:"sampleRatio"`
}

// Enabled reports whether traces are exported.
func (c TraceConfig) Enabled() bool { return c.OTLPEndpoint != "" }

// Validate checks the endpoint is an http(s) URL and the ratio is in (0, 1].
func (c TraceConfig) Validate() error {
	if c.OTLPEndpoint != "" {
		u, err := url.Parse(c.OTLPEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("telemetry.otlpEndpoint: %q is not an http:// or https:// URL", c.OTLPEndpoint)
		}
	}
	if c.SampleRatio < 0 || c.SampleRatio > 1 {
		return fmt.Errorf("telemetry.sampleRatio: %v is not between 0 and 1", c.SampleRatio)
	}
	return nil
}

// NewTracerProvider builds the tracer provider that exports to cfg.OTLPEndpoint in batches.
// Shut it down to flush the last spans.
func NewTracerProvider(cfg TraceConfig) (*sdktrace.TracerProvider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, errors.New("telemetry: no OTLP endpoint configured")
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(cfg.OTLPEndpoint+"/v1/traces"))
	if err != nil {
		return nil, fmt.Errorf("telemetry: the OTLP exporter: %w", err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "gantry"
	}
	ratio := cfg.SampleRatio
	if ratio == 0 {
		ratio = 1
	}
	res := resource.NewSchemaless(semconv.ServiceName(name))
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)))), nil
}

// Propagator reads and writes W3C traceparent and baggage headers.
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// MaxTracedJobs bounds the jobs JobSpans follows at once; past it new jobs are not traced
// beyond their submit (their take and done spans are left out), so memory stays bounded.
const MaxTracedJobs = 100_000

// JobSpans turns a job's life into spans of the trace its submit request began: a "job
// queued" span from the submit to the take, then a "job run" span from the take to the end,
// both children of the submit request's span. The job engine's observer (Jobs) tells it of
// each submit (Submitted, with the submit's context, which carries the request's span), take
// and end.
type JobSpans struct {
	tracer trace.Tracer
	mu     sync.Mutex
	jobs   map[string]*tracedJob
}

type tracedJob struct {
	parent context.Context // holds the submit request's span context; nil until Submitted
	run    trace.Span      // from the take; nil before
	// early is the job as taken, when its take came before Submitted heard of it (a worker
	// waiting on the queue can take a job before the submit request returns).
	early *core.Job
	// over: the job ended before Submitted heard of it; Submitted forgets it.
	over bool
}

// NewJobSpans returns job spans made with tp's tracer.
func NewJobSpans(tp trace.TracerProvider) *JobSpans {
	return &JobSpans{tracer: tp.Tracer("github.com/gantryhq/gantry/telemetry"), jobs: map[string]*tracedJob{}}
}

// Submitted remembers the span of the request that submitted job id (in ctx), when it is
// sampled: the job's later spans join its trace.
func (s *JobSpans) Submitted(ctx context.Context, id string) {
	sc := trace.SpanContextFromContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	tj := s.jobs[id]
	if !sc.IsSampled() || (tj != nil && tj.over) {
		delete(s.jobs, id) // an early take's record: not traced after all
		return
	}
	parent := trace.ContextWithSpanContext(context.Background(), sc)
	switch {
	case tj != nil && tj.early != nil:
		tj.parent = parent
		s.startRun(tj, tj.early)
		tj.early = nil
	case tj == nil && len(s.jobs) < MaxTracedJobs:
		s.jobs[id] = &tracedJob{parent: parent}
	}
}

// jobAttrs are the attributes of a job's spans.
func jobAttrs(j *core.Job) trace.SpanStartEventOption {
	return trace.WithAttributes(attribute.String("gantry.endpoint", j.Endpoint), attribute.String("gantry.job", j.ID),
		attribute.String("gantry.worker", j.WorkerID), attribute.Int("gantry.retries", j.Retries))
}

func (s *JobSpans) taken(j *core.Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tj := s.jobs[j.ID]
	switch {
	case tj == nil && len(s.jobs) < MaxTracedJobs: // before Submitted: it starts the spans
		early := *j
		early.Output = nil
		s.jobs[j.ID] = &tracedJob{early: &early}
		return
	case tj == nil:
		return
	case tj.parent == nil: // taken again before Submitted
		early := *j
		tj.early = &early
		return
	case tj.run != nil: // taken again (a retry, or its worker was lost): the last run ended
		tj.run.SetStatus(codes.Error, "taken again")
		tj.run.End(trace.WithTimestamp(j.QueuedAt))
	}
	s.startRun(tj, j)
}

// startRun ends the "job queued" span at the take and starts the "job run" span.
func (s *JobSpans) startRun(tj *tracedJob, j *core.Job) {
	attrs := jobAttrs(j)
	_, queued := s.tracer.Start(tj.parent, "job queued", trace.WithTimestamp(j.QueuedAt), attrs)
	queued.End(trace.WithTimestamp(j.StartedAt))
	_, tj.run = s.tracer.Start(tj.parent, "job run", trace.WithTimestamp(j.StartedAt), attrs)
}

func (s *JobSpans) ended(j *core.Job) {
	s.mu.Lock()
	tj := s.jobs[j.ID]
	if tj != nil && tj.parent == nil {
		tj.over = true // ended before Submitted heard of it, which forgets it
		tj = nil
	} else {
		delete(s.jobs, j.ID)
	}
	s.mu.Unlock()
	if tj == nil {
		return
	}
	end := j.EndedAt
	if end.IsZero() {
		end = time.Now()
	}
	span := tj.run
	if span == nil { // ended in the queue (cancelled, expired): a span of the wait
		_, span = s.tracer.Start(tj.parent, "job queued", trace.WithTimestamp(j.QueuedAt), jobAttrs(j))
	}
	span.SetAttributes(attribute.String("gantry.status", string(j.Status)))
	if j.Status != core.Completed {
		span.SetStatus(codes.Error, string(j.Status)+": "+j.Error)
	}
	span.End(trace.WithTimestamp(end))
}

// Traced reports how many jobs JobSpans follows now (submitted, not yet ended).
func (s *JobSpans) Traced() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.jobs)
}
