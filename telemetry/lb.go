package telemetry

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LBBuckets are the upper bounds of the LOAD_BALANCER request histogram, in seconds: from a
// worker's answer relayed at once (1 ms) to a long stream or a wait for a cold start.
var LBBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// LBRequests observes the requests of LOAD_BALANCER endpoints (lbproxy.Observer): per
// endpoint and status class (2xx, 4xx, ...), how long each took, from its arrival at the
// proxy to the end of its answer. The histogram's _count is the request count, so rates and
// status codes come from it too. It is a prometheus.Collector.
type LBRequests struct {
	duration *prometheus.HistogramVec
	// children caches the histogram of each (endpoint, class), so that a request costs a map
	// read, not the label hashing of WithLabelValues.
	children sync.Map // lbKey -> prometheus.Observer
	gone     goneSet
}

type lbKey struct {
	endpoint string
	class    uint8 // the status's first digit
}

// NewLBRequests returns the LOAD_BALANCER request metrics, empty.
func NewLBRequests() *LBRequests {
	return &LBRequests{duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "gantry_lb_request_duration_seconds",
		Help: "LOAD_BALANCER requests answered, by endpoint and status class (code: 2xx, 3xx, 4xx, 5xx; 1xx for an upgrade), " +
			"timed from their arrival to the end of the answer, a wait for a worker included. _count counts the requests.",
		Buckets: LBBuckets,
	}, []string{"endpoint", "code"})}
}

var classes = [...]string{"", "1xx", "2xx", "3xx", "4xx", "5xx"}

// ObserveRequest observes one request of endpoint answered with status after elapsed.
func (m *LBRequests) ObserveRequest(endpoint string, status int, elapsed time.Duration) {
	c := status / 100
	if c < 1 || c >= len(classes) || m.gone.has(endpoint) {
		return
	}
	k := lbKey{endpoint, uint8(c)}
	o, ok := m.children.Load(k)
	if !ok {
		o, _ = m.children.LoadOrStore(k, m.duration.WithLabelValues(endpoint, classes[c]))
	}
	o.(prometheus.Observer).Observe(elapsed.Seconds())
}

// Forget drops a deleted endpoint's series, and ignores its requests that end afterwards.
func (m *LBRequests) Forget(endpoint string) {
	m.gone.add(endpoint)
	for c := range classes {
		m.children.Delete(lbKey{endpoint, uint8(c)})
	}
	m.duration.DeletePartialMatch(prometheus.Labels{"endpoint": endpoint})
}

// Describe sends the metrics' descriptions.
func (m *LBRequests) Describe(ch chan<- *prometheus.Desc) { m.duration.Describe(ch) }

// Collect sends the metrics.
func (m *LBRequests) Collect(ch chan<- prometheus.Metric) { m.duration.Collect(ch) }

var _ prometheus.Collector = (*LBRequests)(nil)

// goneSet holds the endpoints deleted lately, whose late observations (a job or request still
// running when its endpoint went) are dropped: their series would come back. It keeps the
// forgottenKept newest.
type goneSet struct {
	ids   sync.Map // endpoint id -> struct{}
	mu    sync.Mutex
	order []string
}

func (g *goneSet) add(endpoint string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, loaded := g.ids.LoadOrStore(endpoint, struct{}{}); !loaded {
		g.order = append(g.order, endpoint)
		if len(g.order) > forgottenKept {
			g.ids.Delete(g.order[0])
			g.order = g.order[1:]
		}
	}
}

func (g *goneSet) has(endpoint string) bool {
	_, ok := g.ids.Load(endpoint)
	return ok
}
