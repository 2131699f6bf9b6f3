package api

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// requests counts the API's requests by operation and status, for /metrics. The counter of
// each (operation, status) pair is looked up in a sync.Map after its first request, so that
// counting a request costs a map read and an atomic add, not the label hashing of
// CounterVec.WithLabelValues; runfast.go's /run is counted the same way.
type requests struct {
	vec      *prometheus.CounterVec
	counters sync.Map // opStatus -> prometheus.Counter
}

type opStatus struct {
	op   string
	code int
}

func newRequests() *requests {
	return &requests{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gantry_requests_total",
		Help: "API requests answered, by operation (openapi.yaml's operationId; \"none\" for a path no operation serves) and HTTP status.",
	}, []string{"operation", "status"})}
}

// count counts one request of operation op answered with code.
func (q *requests) count(op string, code int) {
	k := opStatus{op, code}
	c, ok := q.counters.Load(k)
	if !ok {
		if op == "" {
			op = "none"
		}
		c, _ = q.counters.LoadOrStore(k, q.vec.WithLabelValues(op, strconv.Itoa(code)))
	}
	c.(prometheus.Counter).Inc()
}

// Collector returns the API's metrics (requests by operation and status) as a Prometheus
// collector.
func (a *API) Collector() prometheus.Collector { return a.requests.vec }

// statusRecorder is the ResponseWriter the API's handlers write to: it keeps the status sent.
// Unwrap lets http.ResponseController reach the connection's deadlines and flushes.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 && code >= 200 { // 1xx are interim answers
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush sends what is buffered (stream parts), as the connection's writer does.
func (s *statusRecorder) Flush() {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// status is the status sent; 200 when the handler wrote nothing (net/http's answer).
func (s *statusRecorder) status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}
