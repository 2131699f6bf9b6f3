package api

import (
	"cmp"
	"net/http"
	"strconv"
	"sync"

	"github.com/gantryhq/gantry/lbproxy"
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

// answeredStatus is the status rec's request got: its Code, or 200 when the handler wrote
// nothing (net/http's answer).
func answeredStatus(rec *lbproxy.StatusRecorder) int { return cmp.Or(rec.Code, http.StatusOK) }
