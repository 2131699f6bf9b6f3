package telemetry

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/gantryhq/gantry/core"
)

// setup returns job spans recording to a span recorder, and a sampled submit context.
func setup(t *testing.T) (*Jobs, *tracetest.SpanRecorder, context.Context) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, submit := tp.Tracer("test").Start(context.Background(), "RunJob")
	submit.End()
	m := NewJobs()
	m.Spans = NewJobSpans(tp)
	return m, rec, ctx
}

func job(status core.JobStatus) *core.Job {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	j := &core.Job{ID: "j1", Endpoint: "ep", Status: status, QueuedAt: t0, WorkerID: "w1"}
	if status != core.InQueue {
		j.StartedAt = t0.Add(2 * time.Second)
	}
	if status.Terminal() {
		j.EndedAt = t0.Add(5 * time.Second)
	}
	return j
}

// checkSpans checks the recorder holds "job queued" (2 s) and "job run" (3 s), both children
// of the submit span, and that no job is followed any more.
func checkSpans(t *testing.T, m *Jobs, rec *tracetest.SpanRecorder, ctx context.Context) {
	t.Helper()
	want := map[string]time.Duration{"job queued": 2 * time.Second, "job run": 3 * time.Second}
	ended := rec.Ended()
	for _, s := range ended {
		if d, ok := want[s.Name()]; ok {
			if s.Parent().SpanID() != trace.SpanContextFromContext(ctx).SpanID() || s.EndTime().Sub(s.StartTime()) != d {
				t.Errorf("span %q: parent %s, %v long; want the submit span, %v", s.Name(), s.Parent().SpanID(), s.EndTime().Sub(s.StartTime()), d)
			}
			delete(want, s.Name())
		}
	}
	if len(want) > 0 {
		t.Errorf("spans %v missing among %d ended", want, len(ended))
	}
	if n := m.Spans.Traced(); n != 0 {
		t.Errorf("Traced = %d after the end; want 0", n)
	}
}

func TestJobSpansSubmitTakeDone(t *testing.T) {
	t.Parallel()
	m, rec, ctx := setup(t)
	m.Spans.Submitted(ctx, "j1")
	m.JobTaken(job(core.InProgress))
	m.JobEnded(job(core.Completed), core.InProgress)
	checkSpans(t, m, rec, ctx)
}

// The job engine tells of a submit through its observer, with the submit's context: the
// job's spans are children of the span that context carries.
func TestJobSubmittedFollowsContext(t *testing.T) {
	t.Parallel()
	m, rec, ctx := setup(t)
	m.JobSubmitted(ctx, "ep", "j1")
	m.JobTaken(job(core.InProgress))
	m.JobEnded(job(core.Completed), core.InProgress)
	checkSpans(t, m, rec, ctx)
}

// A worker waiting on the queue can take the job before the submit request hears its id.
func TestJobSpansTakeBeforeSubmitted(t *testing.T) {
	t.Parallel()
	m, rec, ctx := setup(t)
	m.JobTaken(job(core.InProgress))
	m.Spans.Submitted(ctx, "j1")
	m.JobEnded(job(core.Completed), core.InProgress)
	checkSpans(t, m, rec, ctx)
}

// A job that ends before Submitted hears of it is forgotten, not kept for ever.
func TestJobSpansEndBeforeSubmitted(t *testing.T) {
	t.Parallel()
	m, _, ctx := setup(t)
	m.JobTaken(job(core.InProgress))
	m.JobEnded(job(core.Completed), core.InProgress)
	m.Spans.Submitted(ctx, "j1")
	if n := m.Spans.Traced(); n != 0 {
		t.Errorf("Traced = %d; want 0", n)
	}
}

// An unsampled submit is not followed.
func TestJobSpansUnsampled(t *testing.T) {
	t.Parallel()
	m, _, _ := setup(t)
	m.Spans.Submitted(context.Background(), "j1")
	if n := m.Spans.Traced(); n != 0 {
		t.Errorf("Traced = %d after an unsampled submit; want 0", n)
	}
}

func TestTraceConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg TraceConfig
		ok  bool
	}{
		{TraceConfig{}, true},
		{TraceConfig{OTLPEndpoint: "http://127.0.0.1:4318", SampleRatio: 0.5}, true},
		{TraceConfig{OTLPEndpoint: "127.0.0.1:4318"}, false},
		{TraceConfig{OTLPEndpoint: "ftp://x"}, false},
		{TraceConfig{SampleRatio: 2}, false},
	} {
		if err := c.cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("Validate(%+v) = %v; want ok %v", c.cfg, err, c.ok)
		}
	}
}
