package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
	"github.com/gantryhq/gantry/telemetry"
)

// echoJobs creates an echo endpoint on s and runs two jobs on it: one by /run (runfast.go's
// path when traces are off), waited for with /status-sync, and one by /runsync. It returns the
// endpoint's id and the /run job's id.
func echoJobs(t *testing.T, s *server.Server, key string, hdr http.Header) (ep, runID string) {
	t.Helper()
	code, body := servertest.Call(t, "POST", s.URL()+"/v2/serverless", key, echoEndpoint)
	if code != 201 {
		t.Fatalf("create endpoint = %d %s; want 201", code, body)
	}
	var e struct{ ID string }
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", s.URL()+"/v2/"+e.ID+"/run", strings.NewReader(`{"input":{"n":1}}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var ack struct{ ID string }
	if resp.StatusCode != 200 || json.Unmarshal(b, &ack) != nil {
		t.Fatalf("run = %d %s; want 200 with an id", resp.StatusCode, b)
	}
	if code, body := servertest.Call(t, "GET", s.URL()+"/v2/"+e.ID+"/status-sync/"+ack.ID+"?wait=60000", key, ""); code != 200 || !strings.Contains(body, `"COMPLETED"`) {
		t.Fatalf("status-sync = %d %s; want 200 COMPLETED", code, body)
	}
	if code, body := servertest.Call(t, "POST", s.URL()+"/v2/"+e.ID+"/runsync", key, `{"input":{"n":2}}`); code != 200 || !strings.Contains(body, `"COMPLETED"`) {
		t.Fatalf("runsync = %d %s; want 200 COMPLETED", code, body)
	}
	return e.ID, ack.ID
}

// TestMetricsExposition: /metrics is valid Prometheus text that passes promtool's lint, and
// shows the requests by operation and status (the /run that runfast.go answered among them),
// the jobs' delay and execution histograms, their ends and the workers by state.
func TestMetricsExposition(t *testing.T) {
	t.Parallel()
	s := servertest.New(t, server.Config{}, server.Options{Tick: time.Hour})
	key := servertest.Key(t, s, "alice", core.ScopeAll)
	ep, _ := echoJobs(t, s, key, nil)
	if code, _ := servertest.Call(t, "POST", s.URL()+"/v2/"+ep+"/run", "wrong-key", `{"input":{}}`); code != 401 {
		t.Errorf("run with a wrong key = %d; want 401", code)
	}

	resp, err := http.Get(s.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics = %d %s; want 200 text/plain", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	problems, err := promlint.New(strings.NewReader(string(body))).Lint()
	if err != nil || len(problems) > 0 {
		t.Errorf("promlint = %v, %v; want no problems", problems, err)
	}
	if problems, err := testutil.GatherAndLint(s.Metrics()); err != nil || len(problems) > 0 {
		t.Errorf("GatherAndLint = %v, %v; want no problems", problems, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	value := func(name string, labels map[string]string) (float64, bool) {
		f, ok := families[name]
		if !ok {
			return 0, false
		}
	metrics:
		for _, m := range f.Metric {
			for k, v := range labels {
				if !hasLabel(m, k, v) {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
		return 0, false
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"gantry_requests_total", map[string]string{"operation": "createEndpoint", "status": "201"}, 1},
		{"gantry_requests_total", map[string]string{"operation": "runJob", "status": "200"}, 1}, // runfast.go
		{"gantry_requests_total", map[string]string{"operation": "runJob", "status": "401"}, 1},
		{"gantry_requests_total", map[string]string{"operation": "runSyncJob", "status": "200"}, 1},
		{"gantry_job_delay_seconds", map[string]string{"endpoint": ep}, 2},
		{"gantry_job_execution_seconds", map[string]string{"endpoint": ep}, 2},
		{"gantry_jobs_ended_total", map[string]string{"endpoint": ep, "status": "COMPLETED"}, 2},
		{"gantry_workers", map[string]string{"endpoint": ep, "state": "ready"}, 1},
		{"gantry_cold_start_seconds", map[string]string{"endpoint": ep, "mode": "start"}, 1},
		{"gantry_scaling_decisions_total", map[string]string{"endpoint": ep, "direction": "up", "reason": "scale_from_zero"}, 1},
		{"gantry_webhook_deliveries_total", map[string]string{"outcome": "delivered"}, 0},
	} {
		if got, ok := value(c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v); want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "gantry_pool_gpus", "gantry_queue_jobs"} {
		if _, ok := families[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}

	// The Grafana dashboard queries only metrics the server exposes (the GPU ones need a GPU).
	dash, err := os.ReadFile("../telemetry/grafana/gantry.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct{ Targets []struct{ Expr string } }
	}
	if err := json.Unmarshal(dash, &d); err != nil || len(d.Panels) == 0 {
		t.Fatalf("the dashboard: %v (%d panels)", err, len(d.Panels))
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, name := range regexp.MustCompile(`gantry_[a-z_]+`).FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
				if _, ok := families[base]; !ok && !strings.HasPrefix(name, "gantry_worker_gpu_") {
					t.Errorf("the dashboard queries %s, which /metrics does not have", name)
				}
			}
		}
	}
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// otlpReceiver is an OTLP/HTTP trace receiver on 127.0.0.1: it keeps the spans posted to
// /v1/traces.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []span
}

type span struct {
	name            string
	trace, id, from string // hex ids; from = the parent's
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		var msg collectortrace.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(b, &msg) != nil {
			t.Errorf("OTLP receiver got %s %s (%s, %d bytes); want a protobuf POST to /v1/traces", req.Method, req.URL.Path, req.Header.Get("Content-Type"), len(b))
			w.WriteHeader(400)
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					r.spans = append(r.spans, span{name: sp.Name, trace: hexOf(sp.TraceId), id: hexOf(sp.SpanId), from: hexOf(sp.ParentSpanId)})
				}
			}
		}
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// TestTracesFollowAJob: with an OTLP endpoint configured, a job's trace holds the submit
// request's span (joining the caller's traceparent), and under it the job's wait in the queue
// and its run; the spans reach the receiver by the time the server closes.
func TestTracesFollowAJob(t *testing.T) {
	t.Parallel()
	rcv := newOTLPReceiver(t)
	s := servertest.Build(t, server.Config{Telemetry: telemetry.TraceConfig{OTLPEndpoint: rcv.srv.URL}}, server.Options{Tick: time.Hour})
	s.Start()
	key := servertest.Key(t, s, "alice", core.ScopeAll)
	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	echoJobs(t, s, key, http.Header{"Traceparent": {"00-" + traceID + "-" + callerSpan + "-01"}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close() // flushes the last spans

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var submit *span
	byName := map[string][]span{}
	for i, sp := range rcv.spans {
		if sp.trace == traceID {
			byName[sp.name] = append(byName[sp.name], sp)
			if sp.from == callerSpan {
				submit = &rcv.spans[i]
			}
		}
	}
	if submit == nil {
		t.Fatalf("no span of trace %s has the caller's span %s as parent; spans: %+v", traceID, callerSpan, rcv.spans)
	}
	for _, name := range []string{"job queued", "job run"} {
		if got := byName[name]; len(got) != 1 || got[0].from != submit.id {
			t.Errorf("%q spans in the trace = %+v; want one, a child of the submit span %s (%s)", name, got, submit.id, submit.name)
		}
	}
	var takes int
	for _, sp := range rcv.spans {
		if strings.Contains(strings.ToLower(sp.name), "take") {
			takes++
		}
	}
	if takes == 0 {
		t.Errorf("no span of a worker's take request; spans: %+v", rcv.spans)
	}
}
