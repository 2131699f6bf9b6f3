// Package telemetry is Gantry's observability outside the components' own counters: the job
// histograms (delay, execution time) and job ends fed by the job engine's observer port, and
// OpenTelemetry traces of a job's submit, take and done, exported over OTLP when configured.
// The scheduler, the webhooks, the API and the pools keep their own metrics, each behind a
// prometheus.Collector; the composition root registers them all on one registry.
package telemetry

import (
	"context"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/core"
)

// JobBuckets are the upper bounds of the delay and execution histograms, in seconds: from a
// job taken at once (5 ms) to an hour's run.
var JobBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// Jobs observes the job engine (core.JobObserver): per endpoint, the delay of each job taken
// and the execution time of each job that ran, and the jobs ended by status; with Spans set,
// each take and end is also a span of the job's trace. It is a prometheus.Collector.
type Jobs struct {
	delay, execution *prometheus.HistogramVec
	ended            *prometheus.CounterVec
	// Spans, when set, turns takes and ends into spans (traces.go); nil = no traces.
	Spans *JobSpans

	// gone holds the endpoints deleted lately (Forget), whose jobs still running when they
	// end are not observed: their series would come back.
	gone goneSet
}

// forgottenKept is how many deleted endpoints Jobs remembers, to ignore their late jobs.
const forgottenKept = 4096

// Forget drops a deleted endpoint's series, and ignores its jobs that end afterwards.
func (m *Jobs) Forget(endpoint string) {
	m.gone.add(endpoint)
	l := prometheus.Labels{"endpoint": endpoint}
	m.delay.DeletePartialMatch(l)
	m.execution.DeletePartialMatch(l)
	m.ended.DeletePartialMatch(l)
}

// forgotten reports whether endpoint was deleted lately.
func (m *Jobs) forgotten(endpoint string) bool { return m.gone.has(endpoint) }

// NewJobs returns the job metrics, empty.
func NewJobs() *Jobs {
	return &Jobs{
		delay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gantry_job_delay_seconds",
			Help:    "Time jobs waited in an endpoint's queue before a worker took them (delayTime), observed at the take.",
			Buckets: JobBuckets,
		}, []string{"endpoint"}),
		execution: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gantry_job_execution_seconds",
			Help:    "Time jobs ran on a worker, from the take to their end (executionTime), observed at the end.",
			Buckets: JobBuckets,
		}, []string{"endpoint"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_jobs_ended_total",
			Help: "Jobs that reached a terminal status: COMPLETED, FAILED, CANCELLED or TIMED_OUT.",
		}, []string{"endpoint", "status"}),
	}
}

// JobSubmitted starts following the job's trace from its submit: ctx carries the span of the
// request that submitted it (the HTTP middleware's), of which the job's spans become children.
func (m *Jobs) JobSubmitted(ctx context.Context, _, id string) {
	if m.Spans != nil {
		m.Spans.Submitted(ctx, id)
	}
}

// JobTaken observes the job's delay.
func (m *Jobs) JobTaken(j *core.Job) {
	if !j.StartedAt.IsZero() && !m.forgotten(j.Endpoint) {
		m.delay.WithLabelValues(j.Endpoint).Observe(max(j.StartedAt.Sub(j.QueuedAt).Seconds(), 0))
	}
	if m.Spans != nil {
		m.Spans.taken(j)
	}
}

// JobEnded observes the job's execution time (when it ran) and its end.
func (m *Jobs) JobEnded(j *core.Job, from core.JobStatus) {
	gone := m.forgotten(j.Endpoint)
	if from == core.InProgress && !j.StartedAt.IsZero() && !j.EndedAt.IsZero() && !gone {
		m.execution.WithLabelValues(j.Endpoint).Observe(max(j.EndedAt.Sub(j.StartedAt).Seconds(), 0))
	}
	if !gone {
		m.ended.WithLabelValues(j.Endpoint, string(j.Status)).Inc()
	}
	if m.Spans != nil {
		m.Spans.ended(j)
	}
}

// Describe sends the metrics' descriptions.
func (m *Jobs) Describe(ch chan<- *prometheus.Desc) {
	m.delay.Describe(ch)
	m.execution.Describe(ch)
	m.ended.Describe(ch)
}

// Collect sends the metrics.
func (m *Jobs) Collect(ch chan<- prometheus.Metric) {
	m.delay.Collect(ch)
	m.execution.Collect(ch)
	m.ended.Collect(ch)
}

var (
	_ core.JobObserver     = (*Jobs)(nil)
	_ prometheus.Collector = (*Jobs)(nil)
)
