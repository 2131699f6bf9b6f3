package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
)

// recordLog is a slog.Handler that keeps every record, at every level.
type recordLog struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}
func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *recordLog) WithGroup(string) slog.Handler      { return l }

// matching returns the records kept whose message contains s and whose level is at least min.
func (l *recordLog) matching(s string, min slog.Level) []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []slog.Record
	for _, r := range l.records {
		if r.Level >= min && strings.Contains(r.Message, s) {
			out = append(out, r)
		}
	}
	return out
}

// heldFamilies is an unchecked collector of n gauge families, whose Collect waits for release:
// the test hangs up between the request and the answer.
type heldFamilies struct {
	n       int
	release chan struct{}
}

func (heldFamilies) Describe(chan<- *prometheus.Desc) {}
func (h heldFamilies) Collect(ch chan<- prometheus.Metric) {
	<-h.release
	for i := range h.n {
		d := prometheus.NewDesc(fmt.Sprintf("test_family_%d", i), "A family that makes /metrics long enough to fail a write "+strings.Repeat("x", 200), nil, nil)
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(i))
	}
}

// TestMetricsClientHangsUp: a /metrics client that hangs up mid-answer (curl /metrics | head)
// logs no error, one per family left to write; at most one debug line says it left.
func TestMetricsClientHangsUp(t *testing.T) {
	t.Parallel()
	rec := &recordLog{}
	s := servertest.New(t, server.Config{}, server.Options{Tick: time.Hour, Log: slog.New(rec)})
	held := heldFamilies{n: 300, release: make(chan struct{})}
	s.Metrics().MustRegister(held)

	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("GET /metrics HTTP/1.1\r\nHost: gantry\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// Hang up with a reset before the answer, so that its writes fail at once.
	if err := conn.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	close(held.release)

	// The debug line comes once the answer is over, whatever it logged before.
	testkit.Eventually(t, "a debug line that the /metrics client left", func() bool {
		return len(rec.matching("/metrics client left", slog.LevelDebug)) > 0 || len(rec.matching("", slog.LevelError)) > 5
	})
	if errs := rec.matching("", slog.LevelWarn); len(errs) != 0 {
		t.Fatalf("a client that hung up logged %d warnings or errors; want none. The first: %s", len(errs), errs[0].Message)
	}
	if n := len(rec.matching("/metrics client left", slog.LevelDebug)); n != 1 {
		t.Errorf("%d debug lines that the client left; want 1", n)
	}
}

// TestMetricsForgetDeletedEndpoint: a deleted endpoint's series (job histograms and ends, cold
// starts, scaling decisions, queue and worker gauges) leave /metrics; another endpoint's stay.
func TestMetricsForgetDeletedEndpoint(t *testing.T) {
	t.Parallel()
	s := servertest.New(t, server.Config{}, server.Options{Tick: time.Hour})
	key := servertest.Key(t, s, "alice", core.ScopeAll)
	gone, _ := echoJobs(t, s, key, nil)
	kept, _ := echoJobs(t, s, key, nil)
	series := func(ep string) []string {
		t.Helper()
		_, body := servertest.Call(t, "GET", s.URL()+"/metrics", "", "")
		var out []string
		for _, line := range strings.Split(body, "\n") {
			if strings.Contains(line, `"`+ep+`"`) {
				out = append(out, line)
			}
		}
		return out
	}
	before := series(gone)
	for _, name := range []string{"gantry_job_delay_seconds_count", "gantry_jobs_ended_total", "gantry_cold_start_seconds_count", "gantry_scaling_decisions_total"} {
		if !slices.ContainsFunc(before, func(l string) bool { return strings.HasPrefix(l, name+"{") }) {
			t.Fatalf("before the delete, /metrics has no %s of %s", name, gone)
		}
	}
	if code, body := servertest.Call(t, "DELETE", s.URL()+"/v2/serverless/"+gone, key, ""); code != 200 && code != 204 {
		t.Fatalf("delete = %d %s", code, body)
	}
	if after := series(gone); len(after) != 0 {
		t.Errorf("after the delete, /metrics still has %d of %d series of %s; the first: %s", len(after), len(before), gone, after[0])
	}
	if n := len(series(kept)); n < len(before)/2 {
		t.Errorf("the endpoint kept has %d series; want its own (about %d)", n, len(before))
	}
}

// TestMetricsLoadBalancerRequests: /metrics counts a LOAD_BALANCER endpoint's requests by
// status class (the worker's answers, 2xx, 4xx and 5xx) with their latency, and drops them
// when the endpoint is deleted.
func TestMetricsLoadBalancerRequests(t *testing.T) {
	t.Parallel()
	s := servertest.New(t, server.Config{}, server.Options{Tick: time.Hour})
	key := servertest.Key(t, s, "alice", core.ScopeAll)
	var ep struct{ ID string }
	servertest.Expect(t, "POST", s.URL()+"/v2/serverless", key,
		`{"name":"web","type":"LOAD_BALANCER","templateId":"gantry-http-echo","gpu":{"pools":["local"]},"scaling":{"type":"REQUEST_COUNT","requestCount":1}}`, 201, &ep)
	for _, tc := range []struct {
		path string
		want int
	}{{"/x", 200}, {"/y", 200}, {"/status/404", 404}, {"/status/503", 503}} {
		if code, body := servertest.Call(t, "GET", s.URL()+"/lb/"+ep.ID+tc.path, key, ""); code != tc.want {
			t.Fatalf("GET /lb/%s%s = %d %s; want %d", ep.ID, tc.path, code, body, tc.want)
		}
	}
	series := func() []string {
		t.Helper()
		_, body := servertest.Call(t, "GET", s.URL()+"/metrics", "", "")
		var out []string
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "gantry_lb_request_duration_seconds_count{") && strings.Contains(line, `endpoint="`+ep.ID+`"`) {
				out = append(out, line)
			}
		}
		return out
	}
	want := []string{
		`gantry_lb_request_duration_seconds_count{code="2xx",endpoint="` + ep.ID + `"} 2`,
		`gantry_lb_request_duration_seconds_count{code="4xx",endpoint="` + ep.ID + `"} 1`,
		`gantry_lb_request_duration_seconds_count{code="5xx",endpoint="` + ep.ID + `"} 1`,
	}
	if got := series(); !slices.Equal(got, want) {
		t.Errorf("/metrics has\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if code, body := servertest.Call(t, "DELETE", s.URL()+"/v2/serverless/"+ep.ID, key, ""); code != 200 && code != 204 {
		t.Fatalf("delete = %d %s", code, body)
	}
	if got := series(); len(got) != 0 {
		t.Errorf("after the delete, /metrics still has %q", got)
	}
}
