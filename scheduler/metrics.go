package scheduler

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// coldBuckets are the upper bounds of the cold-start histogram, in seconds.
var coldBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// metrics holds the scheduler's counters; gauges are read from the endpoints when written.
type metrics struct {
	// decisions counts scaling decisions: decisionKey -> *atomic.Int64. A sync.Map, so that
	// the tick counts without a lock (after an endpoint's first decision of a kind).
	decisions sync.Map
	mu        sync.Mutex // guards cold
	cold      map[coldKey]*histogram
}

type decisionKey struct{ endpoint, direction, reason string }

type coldKey struct {
	endpoint string
	resumed  bool
}

type histogram struct {
	counts []int64 // per bucket, then +Inf
	sum    float64
	n      int64
}

// decision counts one scaling decision: direction "up" or "down", reason a short code.
func (m *metrics) decision(endpoint, direction, reason string) {
	k := decisionKey{endpoint, direction, reason}
	v, ok := m.decisions.Load(k)
	if !ok {
		v, _ = m.decisions.LoadOrStore(k, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

func (m *metrics) coldStart(endpoint string, resumed bool, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cold == nil {
		m.cold = map[coldKey]*histogram{}
	}
	h := m.cold[coldKey{endpoint, resumed}]
	if h == nil {
		h = &histogram{counts: make([]int64, len(coldBuckets)+1)}
		m.cold[coldKey{endpoint, resumed}] = h
	}
	sec := d.Seconds()
	i, _ := slices.BinarySearch(coldBuckets, sec)
	h.counts[i]++
	h.sum += sec
	h.n++
}

// WriteMetrics writes the scheduler's metrics in the Prometheus text format: per endpoint
// queue depth, jobs in progress, workers by phase, scaling decisions with their reason, cold
// starts; per pool capacity and free GPUs.
func (s *Scheduler) WriteMetrics(w io.Writer) error {
	b := bufio.NewWriter(w)
	type epRow struct {
		id                                                string
		queued, low, running                              int64
		booting, ready, suspended, unhealthy, throttledWs int
	}
	var rows []epRow
	s.eps.Range(func(_, v any) bool {
		es := v.(*epState)
		es.mu.Lock()
		r := epRow{id: es.ep.ID, booting: es.count(phaseBooting), ready: es.count(phaseReady),
			suspended: es.parked, unhealthy: es.lastCond.Unhealthy, throttledWs: es.throttled}
		es.mu.Unlock()
		l := es.load.Load()
		r.queued, r.low, r.running = l.Queued, l.LowQueued, l.InProgress
		rows = append(rows, r)
		return true
	})
	slices.SortFunc(rows, func(a, b epRow) int { return cmp.Compare(a.id, b.id) })

	help := func(name, typ, text string) { fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, typ) }
	help("gantry_queue_jobs", "gauge", "Jobs waiting in an endpoint's queue (priority: normal or low).")
	for _, r := range rows {
		fmt.Fprintf(b, "gantry_queue_jobs{endpoint=%q,priority=\"normal\"} %d\n", r.id, r.queued)
		fmt.Fprintf(b, "gantry_queue_jobs{endpoint=%q,priority=\"low\"} %d\n", r.id, r.low)
	}
	help("gantry_jobs_in_progress", "gauge", "Jobs running on an endpoint's workers.")
	for _, r := range rows {
		fmt.Fprintf(b, "gantry_jobs_in_progress{endpoint=%q} %d\n", r.id, r.running)
	}
	help("gantry_workers", "gauge", "An endpoint's workers by state.")
	for _, r := range rows {
		for _, st := range []struct {
			name string
			n    int
		}{{"booting", r.booting}, {"ready", r.ready}, {"suspended", r.suspended}, {"unhealthy", r.unhealthy}, {"throttled", r.throttledWs}} {
			fmt.Fprintf(b, "gantry_workers{endpoint=%q,state=%q} %d\n", r.id, st.name, st.n)
		}
	}

	type decisionCount struct {
		decisionKey
		n int64
	}
	var decisions []decisionCount
	s.metrics.decisions.Range(func(k, v any) bool {
		decisions = append(decisions, decisionCount{k.(decisionKey), v.(*atomic.Int64).Load()})
		return true
	})
	slices.SortFunc(decisions, func(a, b decisionCount) int {
		return cmp.Or(cmp.Compare(a.endpoint, b.endpoint), cmp.Compare(a.direction, b.direction), cmp.Compare(a.reason, b.reason))
	})
	help("gantry_scaling_decisions_total", "counter", "Workers started or resumed (up) and retired (down), by reason.")
	for _, d := range decisions {
		fmt.Fprintf(b, "gantry_scaling_decisions_total{endpoint=%q,direction=%q,reason=%q} %d\n", d.endpoint, d.direction, d.reason, d.n)
	}
	s.metrics.mu.Lock()
	colds := make([]coldKey, 0, len(s.metrics.cold))
	for k := range s.metrics.cold {
		colds = append(colds, k)
	}
	slices.SortFunc(colds, func(a, b coldKey) int {
		return cmp.Or(cmp.Compare(a.endpoint, b.endpoint), cmp.Compare(strconv.FormatBool(a.resumed), strconv.FormatBool(b.resumed)))
	})
	help("gantry_cold_start_seconds", "histogram", "Time from the decision to start (mode=start) or resume (mode=resume) a worker to its first poll.")
	for _, k := range colds {
		h := s.metrics.cold[k]
		mode := "start"
		if k.resumed {
			mode = "resume"
		}
		labels := fmt.Sprintf("endpoint=%q,mode=%q", k.endpoint, mode)
		var cum int64
		for i, ub := range coldBuckets {
			cum += h.counts[i]
			fmt.Fprintf(b, "gantry_cold_start_seconds_bucket{%s,le=%q} %d\n", labels, strconv.FormatFloat(ub, 'g', -1, 64), cum)
		}
		fmt.Fprintf(b, "gantry_cold_start_seconds_bucket{%s,le=\"+Inf\"} %d\n", labels, h.n)
		fmt.Fprintf(b, "gantry_cold_start_seconds_sum{%s} %s\n", labels, strconv.FormatFloat(h.sum, 'g', -1, 64))
		fmt.Fprintf(b, "gantry_cold_start_seconds_count{%s} %d\n", labels, h.n)
	}
	s.metrics.mu.Unlock()

	help("gantry_pool_gpus", "gauge", "A pool's GPUs (or CPU slots): total and free.")
	for _, sl := range s.placer.order {
		fmt.Fprintf(b, "gantry_pool_gpus{pool=%q,state=\"total\"} %d\n", sl.info.ID, sl.info.GPUs)
		fmt.Fprintf(b, "gantry_pool_gpus{pool=%q,state=\"free\"} %d\n", sl.info.ID, sl.free.Load())
	}
	return b.Flush()
}
