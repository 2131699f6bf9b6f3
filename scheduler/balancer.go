package scheduler

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// LOAD_BALANCER workers (spec 2.6, 4.5): each serves HTTP on PORT and its health on
// PORT_HEALTH at HEALTH_CHECK_PATH (defaults 80, PORT, /ping; the endpoint's env may set them).
// The scheduler polls each worker's health: 204 = initializing, 200 = ready, anything else (or
// no answer) = unhealthy. Only ready workers get requests, the one with the fewest in flight.
const (
	DefaultLBPort       = 80
	DefaultLBHealthPath = "/ping"
	// HealthPollBooting and HealthPollReady are how often a worker's health is polled while
	// it starts and once it is ready.
	HealthPollBooting = 25 * time.Millisecond
	HealthPollReady   = time.Second
	healthTimeout     = 2 * time.Second
	// UnhealthyFor is how long a ready worker may keep failing its health check before it is
	// stopped and replaced.
	UnhealthyFor = 30 * time.Second
	// DefaultLBHold is how long a request waits for a ready worker (scale from zero) before
	// it is answered 503.
	DefaultLBHold = 60 * time.Second
)

// Backend states.
const (
	lbInit      int32 = iota // started or resumed, health not 200 yet
	lbReady                  // takes requests
	lbUnhealthy              // failed its health check: out of rotation
	lbDraining               // being retired: out of rotation
	lbSuspended              // suspended (FLASHBOOT): not polled
)

// backend is a LOAD_BALANCER worker's HTTP side.
type backend struct {
	w        *workerRec
	base     *url.URL // where PORT is reached
	health   string   // the health check URL
	state    atomic.Int32
	inflight atomic.Int64
	lastEnd  atomic.Int64 // Unix nanoseconds of the last request's end, or of becoming ready
	badSince time.Time    // first failed check in the current run of failures (poller only)
	cancel   context.CancelFunc
}

// lbPorts are the ports an endpoint's workers serve, from its env.
func lbPorts(env map[string]string) (port, healthPort int, path string) {
	port, healthPort, path = DefaultLBPort, 0, DefaultLBHealthPath
	if p, err := strconv.Atoi(env["PORT"]); err == nil && p > 0 {
		port = p
	}
	healthPort = port
	if p, err := strconv.Atoi(env["PORT_HEALTH"]); err == nil && p > 0 {
		healthPort = p
	}
	if p := env["HEALTH_CHECK_PATH"]; p != "" {
		path = p
	}
	return port, healthPort, path
}

// lbSpec fills in a LOAD_BALANCER worker's environment and ports.
func (s *Scheduler) lbSpec(ep *core.Endpoint, res *Reservation, spec *pool.WorkerSpec) {
	port, healthPort, path := lbPorts(ep.Env)
	env := maps.Clone(ep.Env)
	if env == nil {
		env = map[string]string{}
	}
	env["PORT"], env["PORT_HEALTH"], env["HEALTH_CHECK_PATH"] = strconv.Itoa(port), strconv.Itoa(healthPort), path
	env["RUNPOD_POD_ID"], env["RUNPOD_ENDPOINT_ID"] = spec.ID, ep.ID
	env["RUNPOD_GPU_COUNT"], env["RUNPOD_DC_ID"] = strconv.Itoa(res.Count), res.s.info.DataCenter
	spec.Env = env
	spec.PortEnv = map[string]int{"PORT": port, "PORT_HEALTH": healthPort}
}

// lbRunning starts polling a started worker's health at the addresses its pool reported.
func (s *Scheduler) lbRunning(w *workerRec, addrs map[int]string) {
	es := w.es
	port, healthPort, path := lbPorts(es.ep.Env)
	b := w.lb
	if addrs[port] == "" || addrs[healthPort] == "" {
		s.cfg.Log.Error("the pool reported no address for the worker's ports", "worker", w.id, "addrs", addrs)
		es.mu.Lock()
		s.stopLocked(w, "its pool gave its ports no address")
		es.mu.Unlock()
		return
	}
	b.base = &url.URL{Scheme: "http", Host: addrs[port]}
	b.health = "http://" + addrs[healthPort] + path
	ctx, cancel := context.WithCancel(s.ctx)
	es.mu.Lock()
	b.cancel = cancel
	es.mu.Unlock()
	s.pollers.Go(func() { s.pollHealth(ctx, b) })
}

// pollHealth checks a worker's health until ctx ends (the worker exited).
func (s *Scheduler) pollHealth(ctx context.Context, b *backend) {
	client := &http.Client{Timeout: healthTimeout, Transport: s.healthTransport()}
	for {
		every := HealthPollReady
		switch b.state.Load() {
		case lbInit:
			every = HealthPollBooting
		case lbSuspended, lbDraining:
			every = HealthPollBooting // skip the check, look again soon
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		if st := b.state.Load(); st == lbSuspended || st == lbDraining {
			continue
		}
		code := 0
		if req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.health, nil); err == nil {
			if resp, err := client.Do(req); err == nil {
				code = resp.StatusCode
				_ = resp.Body.Close()
			}
		}
		s.lbHealth(b, code)
	}
}

// healthTransport is shared by the health pollers: keep-alive connections to each worker.
func (s *Scheduler) healthTransport() http.RoundTripper {
	s.healthOnce.Do(func() {
		s.healthRT = &http.Transport{DialContext: (&net.Dialer{Timeout: healthTimeout}).DialContext, MaxIdleConnsPerHost: 2,
			IdleConnTimeout: 30 * time.Second}
	})
	return s.healthRT
}

// lbHealth applies one health answer (0 = none).
func (s *Scheduler) lbHealth(b *backend, code int) {
	w, es := b.w, b.w.es
	now := s.cfg.Clock.Now()
	switch {
	case code == http.StatusOK:
		b.badSince = time.Time{}
		if b.state.Load() == lbReady {
			return
		}
		es.mu.Lock()
		if st := b.state.Load(); st == lbDraining || st == lbSuspended {
			es.mu.Unlock()
			return
		}
		b.state.Store(lbReady)
		b.lastEnd.Store(now.UnixNano())
		es.lbRebuild()
		es.mu.Unlock()
		s.workerReady(w.id, now) // the end of a cold start, when it was one
	case code == http.StatusNoContent && b.state.Load() != lbReady:
		// still initializing
	default:
		if b.badSince.IsZero() {
			b.badSince = now
		}
		es.mu.Lock()
		defer es.mu.Unlock()
		if b.state.CompareAndSwap(lbReady, lbUnhealthy) { // a starting worker stays starting until its init timeout
			es.lbRebuild()
			s.cfg.Log.Warn("worker unhealthy: out of rotation", "endpoint", es.ep.ID, "worker", w.id, "health", code)
		}
		if b.state.Load() == lbUnhealthy && now.Sub(b.badSince) > UnhealthyFor && w.state == phaseReady {
			s.stopLocked(w, fmt.Sprintf("its health check failed for %s", UnhealthyFor))
		}
	}
}

// lbRebuild publishes the endpoint's ready workers for Acquire, and wakes the requests
// waiting for one; es.mu is held.
func (es *epState) lbRebuild() {
	var ready []*backend
	for _, w := range es.workers {
		if w.lb != nil && w.lb.state.Load() == lbReady && w.state == phaseReady {
			ready = append(ready, w.lb)
		}
	}
	es.lb.Store(&ready)
	if len(ready) > 0 && es.lbReady != nil {
		close(es.lbReady)
		es.lbReady = nil
	}
}

// inflight is the endpoint's requests in flight.
func (es *epState) inflight() int64 {
	var n int64
	for _, w := range es.workers {
		if w.lb != nil {
			n += w.lb.inflight.Load()
		}
	}
	return n
}

// lbFence takes a ready worker out of rotation before it is retired; false (and back in
// rotation) when a request is in flight on it. Acquire counts a request before it checks the
// state, and lbFence changes the state before it checks the count, so one of them sees the
// other.
func (es *epState) lbFence(b *backend) bool {
	if !b.state.CompareAndSwap(lbReady, lbDraining) && !b.state.CompareAndSwap(lbUnhealthy, lbDraining) {
		return b.state.Load() == lbDraining
	}
	es.lbRebuild()
	if b.inflight.Load() > 0 {
		b.state.Store(lbReady)
		es.lbRebuild()
		return false
	}
	return true
}

// Acquire hands a request for a LOAD_BALANCER endpoint to its ready worker with the fewest
// requests in flight, and returns that worker's base URL and the release to call when the
// request ends. With no ready worker it starts one (scale from zero) and waits up to hold for
// it; then it answers a KindUnavailable error. An endpoint the scheduler has not heard of yet
// (created a moment ago through another replica) is read from the endpoint source, or waited
// for, up to EndpointLearnWait. It implements core.Balancer.
func (s *Scheduler) Acquire(ctx context.Context, endpoint string, hold time.Duration) (*url.URL, func(), error) {
	if hold <= 0 {
		hold = DefaultLBHold
	}
	es := s.state(endpoint)
	if es == nil {
		began := time.Now()
		if es = s.learnEndpoint(ctx, endpoint, min(hold, EndpointLearnWait)); es == nil {
			return nil, nil, core.Errorf(core.KindUnavailable, "endpoint %s is not known to the scheduler yet (created on another replica a moment ago?); retry shortly", endpoint)
		}
		hold = max(hold-time.Since(began), time.Millisecond) // the wait counts against the hold
	}
	var deadline <-chan time.Time
	for {
		if b := es.pick(); b != nil {
			return b.base, func() {
				b.lastEnd.Store(s.cfg.Clock.Now().UnixNano())
				b.inflight.Add(-1)
			}, nil
		}
		es.mu.Lock()
		if es.lbReady == nil {
			es.lbReady = make(chan struct{})
		}
		ready := es.lbReady
		now := s.cfg.Clock.Now()
		if !es.deleted && es.active.Load() == 0 && es.ep.Workers.Max > 0 && !s.backingOff(es, now) {
			if err := s.startLocked(es, now, "scale_from_zero"); err == nil {
				s.cfg.Log.Info("scaling up", "endpoint", endpoint, "from", 0, "to", 1, "reason", "scale from zero: a request arrived")
			}
		}
		s.publish(es)
		why := es.lastCond.Reason
		es.mu.Unlock()
		if deadline == nil {
			t := time.NewTimer(hold)
			defer t.Stop()
			deadline = t.C
		}
		es.lbWaiting.Add(1)
		select {
		case <-ready:
			es.lbWaiting.Add(-1)
		case <-deadline:
			es.lbWaiting.Add(-1)
			msg := fmt.Sprintf("no worker of endpoint %s became ready within %s", endpoint, hold)
			if why != "" {
				msg += ": " + why
			}
			return nil, nil, core.Errorf(core.KindUnavailable, "%s", msg)
		case <-ctx.Done():
			es.lbWaiting.Add(-1)
			return nil, nil, core.Errorf(core.KindUnavailable, "the request ended while it waited for a worker: %v", ctx.Err())
		}
	}
}

// pick takes the ready worker with the fewest requests in flight, counting the request on it.
func (es *epState) pick() *backend {
	for {
		p := es.lb.Load()
		if p == nil || len(*p) == 0 {
			return nil
		}
		ready := *p
		start := int(es.rr.Add(1))
		var best *backend
		for i := range ready {
			b := ready[(start+i)%len(ready)]
			if best == nil || b.inflight.Load() < best.inflight.Load() {
				best = b
			}
		}
		best.inflight.Add(1)
		if best.state.Load() == lbReady {
			return best
		}
		best.inflight.Add(-1) // retired meanwhile: pick again
	}
}

// activity says whether a ready worker is busy, how long it has been idle, and whether it
// asked to be recycled; ok is false for a worker that takes no work now.
func (s *Scheduler) activity(w *workerRec, now time.Time) (busy bool, idle time.Duration, stopPod, ok bool) {
	if b := w.lb; b != nil {
		if b.state.Load() != lbReady {
			return false, 0, false, false
		}
		return b.inflight.Load() > 0, now.Sub(time.Unix(0, b.lastEnd.Load())), false, true
	}
	st := w.act.Status()
	return st.Busy > 0, now.Sub(st.IdleSince), st.StopPod, true
}

// lbCounts are a LOAD_BALANCER endpoint's workers for /health; es.mu is held.
func (es *epState) lbCounts(c *core.Condition) {
	for _, w := range es.workers {
		switch {
		case w.lb == nil:
		case w.state == phaseBooting:
			c.Initializing++
		case w.state != phaseReady:
		case w.lb.state.Load() == lbUnhealthy:
			c.Unhealthy++
		case w.lb.inflight.Load() > 0:
			c.Running++
		default:
			c.Idle++
		}
	}
}
