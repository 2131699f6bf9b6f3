package scheduler

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ColdStartBuckets are the upper bounds of the cold-start histogram, in seconds.
var ColdStartBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// metrics holds the scheduler's counters; the gauges are read from the endpoints at each
// scrape (Collect), so that the tick pays nothing for them.
type metrics struct {
	// decisions counts scaling decisions: decisionKey -> *atomic.Int64. A sync.Map, so that
	// the tick counts without a lock (after an endpoint's first decision of a kind).
	decisions sync.Map
	coldOnce  sync.Once
	cold      *prometheus.HistogramVec // endpoint, mode
}

type decisionKey struct{ endpoint, direction, reason string }

// decision counts one scaling decision: direction "up" or "down", reason a short code.
func (m *metrics) decision(endpoint, direction, reason string) {
	k := decisionKey{endpoint, direction, reason}
	v, ok := m.decisions.Load(k)
	if !ok {
		v, _ = m.decisions.LoadOrStore(k, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

// forget drops a deleted endpoint's decisions and cold starts.
func (m *metrics) forget(endpoint string) {
	m.decisions.Range(func(k, _ any) bool {
		if k.(decisionKey).endpoint == endpoint {
			m.decisions.Delete(k)
		}
		return true
	})
	m.coldVec().DeletePartialMatch(prometheus.Labels{"endpoint": endpoint})
}

func (m *metrics) coldVec() *prometheus.HistogramVec {
	m.coldOnce.Do(func() {
		m.cold = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gantry_cold_start_seconds",
			Help:    "Time from the decision to start (mode=start) or resume (mode=resume) a worker to its first poll.",
			Buckets: ColdStartBuckets,
		}, []string{"endpoint", "mode"})
	})
	return m.cold
}

func (m *metrics) coldStart(endpoint string, resumed bool, d time.Duration) {
	mode := "start"
	if resumed {
		mode = "resume"
	}
	m.coldVec().WithLabelValues(endpoint, mode).Observe(d.Seconds())
}

// The descriptions of the metrics Collect reads from the endpoints and pools.
var (
	queueDesc = prometheus.NewDesc("gantry_queue_jobs",
		"Jobs waiting in an endpoint's queue (priority: normal or low).", []string{"endpoint", "priority"}, nil)
	inProgressDesc = prometheus.NewDesc("gantry_jobs_in_progress",
		"Jobs running on an endpoint's workers.", []string{"endpoint"}, nil)
	workersDesc = prometheus.NewDesc("gantry_workers",
		"An endpoint's workers by state: booting, ready, suspended, unhealthy, and throttled (wanted, but no pool had room).",
		[]string{"endpoint", "state"}, nil)
	decisionsDesc = prometheus.NewDesc("gantry_scaling_decisions_total",
		"Workers started or resumed (direction=up) and retired (direction=down), by reason.",
		[]string{"endpoint", "direction", "reason"}, nil)
	poolDesc = prometheus.NewDesc("gantry_pool_gpus",
		"A pool's GPUs (or CPU slots) by state: total and free.", []string{"pool", "state"}, nil)
)

// Collector returns the scheduler's metrics as a Prometheus collector: per endpoint queue
// depth, jobs in progress, workers by state, scaling decisions with their reason and cold
// starts; per pool total and free GPUs.
func (s *Scheduler) Collector() prometheus.Collector { return (*collector)(s) }

// collector is the Scheduler seen as a prometheus.Collector.
type collector Scheduler

// Describe sends the descriptions of every metric Collect sends.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{queueDesc, inProgressDesc, workersDesc, decisionsDesc, poolDesc} {
		ch <- d
	}
	c.metrics.coldVec().Describe(ch)
}

// Collect reads the endpoints' and pools' figures and sends them with the counters.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := (*Scheduler)(c)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	// A follower runs no workers: its worker and pool series would read as idle, empty pools
	// beside the leader's real ones, so only the leader sends them.
	leading := !s.following.Load()
	s.eps.Range(func(_, v any) bool {
		es := v.(*epState)
		es.mu.Lock()
		id := es.ep.ID
		states := [...]struct {
			name string
			n    int
		}{{"booting", es.count(phaseBooting)}, {"ready", es.count(phaseReady)}, {"suspended", es.parked},
			{"unhealthy", es.lastCond.Unhealthy}, {"throttled", es.throttled}}
		es.mu.Unlock()
		l := es.load.Load(false)
		gauge(queueDesc, float64(l.Queued), id, "normal")
		gauge(queueDesc, float64(l.LowQueued), id, "low")
		gauge(inProgressDesc, float64(l.InProgress), id)
		if leading {
			for _, st := range states {
				gauge(workersDesc, float64(st.n), id, st.name)
			}
		}
		return true
	})
	s.metrics.decisions.Range(func(k, v any) bool {
		d := k.(decisionKey)
		if _, ok := s.eps.Load(d.endpoint); !ok {
			return true // a decision that came after its endpoint's removal
		}
		ch <- prometheus.MustNewConstMetric(decisionsDesc, prometheus.CounterValue,
			float64(v.(*atomic.Int64).Load()), d.endpoint, d.direction, d.reason)
		return true
	})
	s.metrics.coldVec().Collect(ch)
	if !leading {
		return
	}
	for _, sl := range s.placer.order {
		gauge(poolDesc, float64(sl.info.GPUs), sl.info.ID, "total")
		gauge(poolDesc, float64(sl.free.Load()), sl.info.ID, "free")
	}
}
