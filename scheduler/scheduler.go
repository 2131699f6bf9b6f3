package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/core"
)

// PingInterval is the heartbeat period handed to workers; well inside core.WorkerLostAfter.
const PingInterval = 10 * time.Second

// Defaults of Config.
const (
	DefaultInitTimeout = 7 * time.Minute // RunPod marks workers unhealthy after about as long
	DefaultBackoffMin  = time.Second
	DefaultBackoffMax  = 5 * time.Minute
	// RequestCountIdleGrace is how long a worker of a QUEUE endpoint scaling on REQUEST_COUNT
	// (which has no idleTimeout, spec 2.3) must be idle before scale-down retires it.
	RequestCountIdleGrace = core.DefaultIdleTimeout * time.Second
	// headScan bounds how many queued keys a tick reads to find the oldest job that counts.
	headScan = 32
)

// EndpointSource is where the scheduler reads endpoints from at start and on resync.
type EndpointSource interface {
	ScanEndpoints(ctx context.Context, fn func(core.Endpoint) error) error
}

// Config wires a Scheduler. Units and special values are on each field.
type Config struct {
	Jobs   *core.Jobs
	Queues *Queues
	Pools  []Pool
	// VolumeDC returns a network volume's data center: an endpoint's volumes pin its workers
	// there. nil = no volumes are known.
	VolumeDC func(id string) (string, bool)
	// BaseURL is where workers reach Gantry, e.g. "http://127.0.0.1:8080".
	BaseURL string
	Clock   core.Clock
	Log     *slog.Logger
	// InitTimeout stops a worker that has not polled for a job this long after it started;
	// 0 = DefaultInitTimeout.
	InitTimeout time.Duration
	// BackoffMin and BackoffMax bound the delay before the next start after workers crash
	// before taking a job (doubling per crash in a row); 0 = the defaults.
	BackoffMin, BackoffMax time.Duration
	// StableWindow and PanicWindow are the autoscaler's windows in ticks; 0 = StableWindow
	// (60) and PanicWindow (6).
	StableWindow, PanicWindow int
}

// Scheduler runs every endpoint's workers: it autoscales them between workers.min and
// workers.max by the endpoint's scaling policy, places them on pools with lock-free
// reservations, suspends and resumes them (FLASHBOOT), and reports what it cannot do on
// /health. Tick is one autoscaler pass; Demand starts a worker at once for the first job on an
// endpoint scaled to zero; WorkerReady measures cold starts.
type Scheduler struct {
	cfg    Config
	placer *Placer
	eps    sync.Map // endpoint id -> *epState
	byID   sync.Map // worker id -> *workerRec
	listMu sync.Mutex
	list   atomic.Pointer[[]*epState] // every endpoint, for Tick; replaced (copied) on change
	// tickWaits makes every tick wait for each endpoint's lock instead of passing a busy one
	// by: the scheduler's own tests set it, so that a tick's decisions do not depend on a pool
	// call or health poll holding the lock at that instant.
	tickWaits bool

	suspended suspendedWorkers

	healthOnce sync.Once
	healthRT   http.RoundTripper // LOAD_BALANCER health checks

	ctx     context.Context // pool calls; cancelled by Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup // pool calls in flight
	pollers sync.WaitGroup // LOAD_BALANCER health pollers, one per running worker
	closed  atomic.Bool
	holding atomic.Bool // Hold: no worker starts or resumes (shutdown.go)

	metrics metrics
}

// epState is one endpoint as the scheduler runs it. mu guards everything but active.
type epState struct {
	// First, together, what a tick reads to pass a quiet endpoint by: ticks walk every
	// endpoint, and under load each cache line a tick misses costs.
	mu sync.Mutex
	// busyTicks counts the ticks in a row that found mu held and passed the endpoint by.
	busyTicks atomic.Int32
	deleted   bool
	queueType bool // ep.Type == core.TypeQueue
	// changes counts changes to the workers' phases and to the endpoint (recount, Set).
	// quietUntil: a tick at changes == quietAt found the endpoint calm (nothing queued, running
	// or failing) and every worker idle; until then, while that holds, no decision can differ
	// (the first idle retirement is due then), so ticks pass the endpoint by (windows: catchUp).
	changes    uint64
	quietAt    uint64
	quietUntil time.Time
	load       core.LoadCounter
	failures   int    // workers in a row that crashed before their first poll
	throttled  int    // workers wanted that no pool had room for at the last try
	scaler     scaler // its fields for that check come first

	ep      core.Endpoint
	want    Want
	gen     int          // bumped when what workers run changes (image, env, gpu...)
	workers []*workerRec // a slice: ticks walk it, and an endpoint has few
	// parked and suspended count the workers suspending or suspended, and suspended alone
	// (recount): publish, retire and resume read them instead of walking the workers.
	parked, suspended int
	queue             *queue       // its queue in Queues (queue endpoints)
	active            atomic.Int32 // booting + ready workers, read without mu by Demand

	// LOAD_BALANCER endpoints (balancer.go).
	lb        atomic.Pointer[[]*backend] // the workers that take requests now
	lbWaiting atomic.Int64               // requests waiting for a worker
	lbReady   chan struct{}              // closed when a worker becomes ready; made by waiters
	rr        atomic.Uint32              // round-robin start among equally loaded workers

	nextStart time.Time    // no start before this while failures > 0
	failure   string       // the last failure
	noRoom    *NoRoomError // why, at the last try
	noRoomMsg string       // the health reason for noRoomOf
	noRoomOf  *NoRoomError // what noRoomMsg says
	cold      coldStats
	lastCond  core.Condition
	exited    []exitedWorker // the last few workers that exited, oldest first (fleet.go)
}

type coldStats struct {
	n           int64
	last, total time.Duration
}

// workerRec is one worker of an endpoint.
type workerRec struct {
	id        string
	es        *epState
	res       *Reservation
	gen       int
	state     workerPhase
	startedAt time.Time // last start or resume decision
	polled    bool      // it polled at least once since it started
	resumed   bool      // the current cold start is a resume
	stopping  bool      // Stop was called: its exit is expected
	killed    bool      // killed as lost (lost.go)
	failed    bool      // its stop counts as a crash (init timeout)
	pinned    bool      // suspended by a PRIORITY_FLASHBOOT endpoint: reclaimed last
	susAt     time.Time
	lb        *backend            // a LOAD_BALANCER worker's HTTP side; nil for queue workers
	act       core.WorkerActivity // a queue worker's activity, read without the job engine's lock
	coldStart time.Duration       // how long its last start or resume took
}

type workerPhase int

const (
	phaseBooting    workerPhase = iota + 1 // started or resuming, not polling yet
	phaseReady                             // polls for jobs
	phaseSuspending                        // being suspended
	phaseSuspended                         // suspended (FLASHBOOT)
	phaseStopping                          // stopped, waiting for its exit
)

// New returns a scheduler over the pools.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Jobs == nil || cfg.Queues == nil {
		return nil, errors.New("scheduler: Jobs and Queues are required")
	}
	placer, err := NewPlacer(cfg.Pools)
	if err != nil {
		return nil, err
	}
	cfg.Clock = cmp.Or[core.Clock](cfg.Clock, core.SystemClock{})
	cfg.Log = cmp.Or(cfg.Log, slog.Default())
	cfg.InitTimeout = cmp.Or(cfg.InitTimeout, DefaultInitTimeout)
	cfg.BackoffMin = cmp.Or(cfg.BackoffMin, DefaultBackoffMin)
	cfg.BackoffMax = cmp.Or(cfg.BackoffMax, DefaultBackoffMax)
	cfg.StableWindow = cmp.Or(cfg.StableWindow, StableWindow)
	cfg.PanicWindow = cmp.Or(cfg.PanicWindow, PanicWindow)
	if cfg.PanicWindow > cfg.StableWindow {
		return nil, fmt.Errorf("scheduler: the panic window (%d) is longer than the stable window (%d)", cfg.PanicWindow, cfg.StableWindow)
	}
	if cfg.VolumeDC == nil {
		cfg.VolumeDC = func(string) (string, bool) { return "", false }
	}
	s := &Scheduler{cfg: cfg, placer: placer, suspended: newSuspendedWorkers(placer)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	cfg.Jobs.OnWorkerLost(s.WorkerLost)
	return s, nil
}

// Placer returns the scheduler's placer (its pools' free capacity).
func (s *Scheduler) Placer() *Placer { return s.placer }

// Set adds an endpoint or applies its new settings: scaling, worker bounds and GPU choice take
// effect at the next tick; workers running an old image, env or GPU choice are replaced as
// they become idle.
func (s *Scheduler) Set(ep core.Endpoint) {
	v, loaded := s.eps.LoadOrStore(ep.ID, &epState{ep: ep, queueType: ep.Type == core.TypeQueue,
		scaler: newScaler(s.cfg.StableWindow, s.cfg.PanicWindow), load: s.cfg.Jobs.LoadCounter(ep.ID),
		queue: s.cfg.Queues.queue(ep.ID)})
	es := v.(*epState)
	if !loaded {
		s.listMu.Lock()
		var l []*epState
		if p := s.list.Load(); p != nil {
			l = append(l, (*p)...)
		}
		l = append(l, es)
		s.list.Store(&l)
		s.listMu.Unlock()
	}
	es.mu.Lock()
	defer es.mu.Unlock()
	if loaded && workerSpecChanged(es.ep, ep) {
		es.gen++
	}
	es.ep = ep
	es.queueType = ep.Type == core.TypeQueue
	es.changes++
	es.deleted = false
	es.want = WantOf(&es.ep, s.cfg.VolumeDC)
}

// workerSpecChanged reports whether workers started for a must be replaced to match b.
func workerSpecChanged(a, b core.Endpoint) bool {
	return a.Image != b.Image || a.Args != b.Args || !maps.Equal(a.Env, b.Env) || a.Disk != b.Disk ||
		!slices.Equal(a.Ports, b.Ports) || !slices.Equal(a.GPU.Pools, b.GPU.Pools) || a.GPU.Count != b.GPU.Count ||
		!slices.Equal(a.DataCenterIDs, b.DataCenterIDs) || !slices.Equal(a.AllowedCudaVersions, b.AllowedCudaVersions) ||
		!slices.Equal(a.NetworkVolumes, b.NetworkVolumes)
}

// Remove stops every worker of a deleted endpoint, suspended ones too.
func (s *Scheduler) Remove(id string) {
	v, ok := s.eps.LoadAndDelete(id)
	if !ok {
		return
	}
	es := v.(*epState)
	s.listMu.Lock()
	if p := s.list.Load(); p != nil {
		l := slices.DeleteFunc(slices.Clone(*p), func(e *epState) bool { return e == es })
		s.list.Store(&l)
	}
	s.listMu.Unlock()
	es.mu.Lock()
	defer es.mu.Unlock()
	es.deleted = true
	for _, w := range es.workers {
		s.stopLocked(w, "its endpoint was deleted")
	}
}

// Sync reads every endpoint from src: new and changed ones are Set, missing ones removed.
func (s *Scheduler) Sync(ctx context.Context, src EndpointSource) error {
	seen := map[string]bool{}
	err := src.ScanEndpoints(ctx, func(ep core.Endpoint) error {
		seen[ep.ID] = true
		if v, ok := s.eps.Load(ep.ID); ok {
			es := v.(*epState)
			es.mu.Lock()
			same := es.ep.UpdatedAt.Equal(ep.UpdatedAt)
			es.mu.Unlock()
			if same {
				return nil
			}
		}
		s.Set(ep)
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing endpoints: %w", err)
	}
	s.eps.Range(func(k, _ any) bool {
		if !seen[k.(string)] {
			s.Remove(k.(string))
		}
		return true
	})
	return nil
}

// Demand starts a worker at once when a job that may scale up is queued on an endpoint with
// no worker: the first job on a scaled-to-zero endpoint skips the autoscaler's windows. It is
// called for every enqueued job, so it costs an atomic load when workers exist.
func (s *Scheduler) Demand(endpoint string) {
	v, ok := s.eps.Load(endpoint)
	if !ok {
		return
	}
	es := v.(*epState)
	if es.active.Load() > 0 || s.closed.Load() {
		return
	}
	if es.load.Load().Queued == 0 {
		return // lowPriority jobs do not scale up
	}
	es.mu.Lock()
	defer es.mu.Unlock()
	now := s.cfg.Clock.Now()
	if es.deleted || es.ep.Type != core.TypeQueue || es.active.Load() > 0 || es.ep.Workers.Max == 0 || s.backingOff(es, now) {
		return
	}
	if err := s.startLocked(es, now, "scale_from_zero"); err == nil {
		s.cfg.Log.Info("scaling up", "endpoint", es.ep.ID, "from", 0, "to", 1, "reason", "scale from zero: a job arrived")
	}
}

// WorkerReady records a worker's first poll since it started or resumed: the end of its cold
// start. Wire it to core.JobsConfig.OnWorkerReady.
func (s *Scheduler) WorkerReady(worker string) {
	v, ok := s.byID.Load(worker)
	if !ok {
		return
	}
	w := v.(*workerRec)
	es := w.es
	es.mu.Lock()
	defer es.mu.Unlock()
	if w.state != phaseBooting {
		return
	}
	d := s.cfg.Clock.Now().Sub(w.startedAt)
	w.state, w.polled, w.coldStart = phaseReady, true, d
	es.failures, es.failure = 0, ""
	es.cold.n++
	es.cold.last = d
	es.cold.total += d
	s.metrics.coldStart(es.ep.ID, w.resumed, d)
	es.recount()
	s.publish(es)
	if w.lb != nil {
		es.lbRebuild() // it takes requests from now on
	}
	s.cfg.Log.Info("worker ready", "endpoint", es.ep.ID, "worker", w.id, "coldStart", d, "resumed", w.resumed)
}

// tickChunk is how many endpoints one goroutine of a Tick takes at a time.
const tickChunk = 256

// maxBusyTicks is how many ticks in a row may pass an endpoint by because its lock was held;
// the next one waits for the lock.
const maxBusyTicks = 2

// Tick runs one autoscaler pass over every endpoint at now. Endpoints are independent (each
// has its own lock), so GOMAXPROCS goroutines share them, a chunk at a time.
func (s *Scheduler) Tick(now time.Time) {
	p := s.list.Load()
	if p == nil {
		return
	}
	eps := *p
	if len(eps) == 0 {
		return
	}
	// The endpoints are taken in chunks by this goroutine and GOMAXPROCS-1 helpers. Tick waits
	// for the chunks being ticked, not for the helpers: on busy CPUs a helper may start only
	// after this goroutine has done every chunk, and then it finds nothing to do.
	var next, ticked atomic.Int64
	all := int64(len(eps))
	done := make(chan struct{})
	work := func() {
		var sc scratch
		var busy []*epState
		for {
			end := next.Add(tickChunk)
			start := end - tickChunk
			if start >= all {
				return
			}
			end = min(end, all)
			busy = busy[:0]
			for _, es := range eps[start:end] {
				if !s.tick(es, now, &sc) {
					busy = append(busy, es)
				}
			}
			for _, es := range busy { // a second try after the chunk; then at the next tick
				if !s.tick(es, now, &sc) {
					es.busyTicks.Add(1)
				}
			}
			if ticked.Add(end-start) == all {
				close(done)
			}
		}
	}
	for range min(runtime.GOMAXPROCS(0), int(all+tickChunk-1)/tickChunk) - 1 {
		go work()
	}
	work()
	<-done
}

// Run ticks every interval and resyncs endpoints from src every resync, until ctx ends; then
// it stops every worker and waits for them.
func (s *Scheduler) Run(ctx context.Context, src EndpointSource, interval, resync time.Duration) {
	if err := s.Sync(ctx, src); err != nil && ctx.Err() == nil {
		s.cfg.Log.Error("reading endpoints", "err", err)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			s.Close()
			return
		case <-t.C:
		}
		if time.Since(last) >= resync {
			last = time.Now()
			if err := s.Sync(ctx, src); err != nil && ctx.Err() == nil {
				s.cfg.Log.Error("reading endpoints", "err", err)
			}
		}
		s.Tick(s.cfg.Clock.Now())
	}
}

// Close stops every worker, suspended ones too, and waits for the pool calls in flight.
func (s *Scheduler) Close() {
	if s.closed.Swap(true) {
		return
	}
	s.eps.Range(func(_, v any) bool {
		es := v.(*epState)
		es.mu.Lock()
		for _, w := range es.workers {
			s.stopLocked(w, "the server is stopping")
		}
		es.mu.Unlock()
		return true
	})
	s.wg.Wait()
	s.cancel()
	s.pollers.Wait()
}

// count returns how many of the endpoint's workers are in the phases.
func (es *epState) count(phases ...workerPhase) int {
	n := 0
	for _, w := range es.workers {
		if slices.Contains(phases, w.state) {
			n++
		}
	}
	return n
}

// recount follows a change to the workers' phases: it counts them again in one pass.
func (es *epState) recount() {
	es.changes++
	active, parked, suspended := 0, 0, 0
	for _, w := range es.workers {
		switch w.state {
		case phaseBooting, phaseReady:
			active++
		case phaseSuspended:
			suspended++
			parked++
		case phaseSuspending:
			parked++
		}
	}
	es.parked, es.suspended = parked, suspended
	es.active.Store(int32(active))
}

func (s *Scheduler) backingOff(es *epState, now time.Time) bool {
	return es.failures > 0 && now.Before(es.nextStart)
}

// scratch is the buffers one Tick reuses across endpoints.
type scratch struct {
	head    []Queued
	idle    []idleWorker
	booting []*workerRec
}

// tick is one autoscaler pass over one endpoint. An endpoint whose lock is held (a worker
// starting or stopping, a job arriving at an endpoint with no worker) is passed by, and tick
// returns false, unless it was passed by in the last maxBusyTicks ticks: the holder may be a
// goroutine waiting for a CPU, and the tick does not wait with it (its other endpoints would).
func (s *Scheduler) tick(es *epState, now time.Time, sc *scratch) bool {
	if s.tickWaits || es.busyTicks.Load() >= maxBusyTicks {
		es.mu.Lock()
	} else if !es.mu.TryLock() {
		return false
	}
	defer es.mu.Unlock()
	es.busyTicks.Store(0)
	if es.deleted {
		return true
	}
	var load core.Load
	if es.queueType {
		load = es.load.Load()
		// Fast path: a quiet endpoint (see quietUntil) that is still calm, with no job
		// submitted or ended since, has nothing to decide; the windows get the skipped ticks'
		// zero samples when it has (catchUp).
		if es.calm(load) && load.Submitted == es.scaler.lastSubmitted && load.ExecCount == es.scaler.lastExecN &&
			es.quietAt == es.changes && now.Before(es.quietUntil) {
			es.scaler.skipped++
			return true
		}
	}
	es.scaler.catchUp()
	changes := es.changes
	ep := &es.ep

	// Survey the workers: promote, recycle and time out; collect the idle ones.
	idle, booting := sc.idle[:0], sc.booting[:0]
	defer func() { sc.idle, sc.booting = idle[:0], booting[:0] }()
	ready := 0
	workers := es.workers
	if es.active.Load() == 0 {
		workers = nil // none booting or ready: nothing below to read in the others
	}
	for _, w := range workers {
		switch w.state {
		case phaseBooting:
			if now.Sub(w.startedAt) > s.cfg.InitTimeout {
				what := "poll for a job"
				if w.lb != nil {
					what = "pass its health check"
				}
				s.fail(es, now, fmt.Sprintf("worker %s did not %s within %s of its start", w.id, what, s.cfg.InitTimeout))
				w.failed = true
				s.stopLocked(w, "init timeout")
				s.metrics.decision(ep.ID, "down", "init_timeout")
				continue
			}
			booting = append(booting, w)
		case phaseReady:
			busy, idleFor, stopPod, ok := s.activity(w, now)
			if !ok {
				continue
			}
			if !busy && (stopPod || w.gen != es.gen) {
				why := "its last job asked for stopPod"
				if w.gen != es.gen {
					why = "the endpoint's image, env or GPU settings changed"
				}
				s.retireLocked(w, why, false)
				continue
			}
			ready++
			if !busy {
				idle = append(idle, idleWorker{w, idleFor})
			}
		}
	}

	var sig signals
	if es.queueType {
		sig = signals{Queued: load.Queued, InProgress: load.InProgress, Arrivals: float64(load.Submitted - es.scaler.lastSubmitted)}
		es.scaler.lastSubmitted = load.Submitted
		es.scaler.observeService(load)
		if load.Queued > 0 && ep.Scaling.Type == core.ScaleQueueDelay { // REQUEST_COUNT counts jobs, not their wait
			sig.OldestWait = s.oldestWait(es, now, sc)
		}
	} else {
		// LOAD_BALANCER: requests waiting for a worker and requests in flight (spec 2.4: these
		// scale on REQUEST_COUNT).
		sig.Queued, sig.InProgress = es.lbWaiting.Load(), es.inflight()
		load.Queued = sig.Queued
	}
	sig.Ready, sig.Booting = ready, len(booting)
	active := ready + len(booting)
	want, hold, reason := es.scaler.desired(ep.Scaling, sig)
	if sig.Queued > 0 && active == 0 {
		want, hold, reason = max(want, 1), false, why{kind: whyText, text: "scale from zero: work is waiting"}
	}
	if hold {
		want = active
	}
	target := bound(want, active, ep.Workers)
	es.throttled, es.noRoom = 0, nil

	switch {
	case target > active:
		if s.backingOff(es, now) {
			break
		}
		code := "request_count"
		switch {
		case active == 0 && sig.Queued > 0:
			code = "scale_from_zero"
		case want <= ep.Workers.Min:
			code = "min"
		case ep.Scaling.Type == core.ScaleQueueDelay:
			code = "queue_delay"
		case es.scaler.panicking:
			code = "panic"
		}
		started := 0
		for range target - active {
			if err := s.startLocked(es, now, code); err != nil {
				break
			}
			started++
		}
		if started > 0 {
			s.cfg.Log.Info("scaling up", "endpoint", ep.ID, "from", active, "to", active+started, "reason", cmp.Or(reason.String(), "workers.min"))
		}
	default:
		s.scaleDown(es, active, target, hold, load.Queued+load.LowQueued > 0, booting, idle)
	}
	es.quietUntil = time.Time{}
	if es.queueType && es.changes == changes && es.calm(load) && len(booting) == 0 && len(idle) == ready {
		es.quietAt, es.quietUntil = changes, s.quietUntil(es, now, active, idle)
	}
	s.publish(es)
	return true
}

// oldestWait is how long the oldest queued job that may scale the endpoint up has waited. The
// queue's head is nearly always that job; keys of jobs cancelled while queued, and lowPriority
// ones, are passed over, up to headScan of them.
func (s *Scheduler) oldestWait(es *epState, now time.Time, sc *scratch) time.Duration {
	for n := 1; ; n = headScan {
		sc.head = es.queue.headInto(n, sc.head[:0])
		for _, q := range sc.head {
			if live, low := s.cfg.Jobs.Waiting(q.Key); live && !low {
				return max(now.Sub(time.Unix(0, q.At)), 0)
			}
		}
		if n == headScan || len(sc.head) < n {
			return 0
		}
	}
}

// calm says that nothing is queued or running on the endpoint and its workers are not failing
// or waiting for capacity.
func (es *epState) calm(load core.Load) bool {
	return es.failures == 0 && es.throttled == 0 && load.Queued == 0 && load.LowQueued == 0 && load.InProgress == 0
}

// never is later than any tick.
var never = time.Unix(1<<62, 0)

// maxQuiet bounds how long ticks pass a quiet endpoint that has workers by.
const maxQuiet = 10 * time.Second

// quietUntil is until when ticks may pass a quiet endpoint by: with no worker and none wanted,
// for good (only a job or a change ends that); else until its first idle worker is due to
// retire (its idle grace ends), or maxQuiet from now when none can (workers.min of them run).
func (s *Scheduler) quietUntil(es *epState, now time.Time, active int, idle []idleWorker) time.Time {
	if len(es.workers) == 0 && es.ep.Workers.Min == 0 {
		return never
	}
	until := now.Add(maxQuiet)
	if active > es.ep.Workers.Min {
		grace := idleGrace(&es.ep)
		for _, iw := range idle {
			if t := now.Add(grace - iw.idle); t.Before(until) {
				until = t
			}
		}
	}
	return until
}

// idleGrace is how long a worker of ep stays idle before it may retire.
func idleGrace(ep *core.Endpoint) time.Duration {
	if ep.IdleTimeoutApplies() {
		return time.Duration(ep.Workers.IdleTimeout) * time.Second
	}
	return RequestCountIdleGrace
}

type idleWorker struct {
	w    *workerRec
	idle time.Duration
}

// scaleDown retires workers beyond the target: booting ones first (they hold nothing, and only
// while no job waits), then idle ones, longest idle first, once idle past the endpoint's idle
// timeout. A worker holding a job is never retired. With hold (QUEUE_DELAY with no delay to
// fix) the idle timers alone retire workers down to workers.min. Workers beyond workers.max
// (lowered by PATCH) go without waiting for the idle timeout.
func (s *Scheduler) scaleDown(es *epState, active, target int, hold, queued bool, booting []*workerRec, idle []idleWorker) {
	ep := &es.ep
	excess := active - target
	if hold {
		excess = active - ep.Workers.Min
	}
	over := active - ep.Workers.Max
	if excess <= 0 && over <= 0 {
		return
	}
	if !hold || over > 0 {
		for i := len(booting) - 1; i >= 0 && excess > 0 && (!queued || over > 0); i-- {
			s.stopLocked(booting[i], "scale-down: not needed any more")
			s.metrics.decision(ep.ID, "down", "booting_not_needed")
			excess--
			over--
		}
	}
	grace := idleGrace(ep)
	slices.SortFunc(idle, func(a, b idleWorker) int { return cmp.Compare(b.idle, a.idle) })
	for _, iw := range idle {
		if (excess <= 0 || queued) && over <= 0 {
			break // an idle worker takes queued jobs as soon as it polls
		}
		if iw.idle < grace && over <= 0 {
			break
		}
		why := fmt.Sprintf("idle for %s (idle timeout %s)", iw.idle.Round(time.Millisecond), grace)
		if over > 0 {
			why = fmt.Sprintf("over workers.max %d", ep.Workers.Max)
		}
		s.retireLocked(iw.w, why, over <= 0)
		s.metrics.decision(ep.ID, "down", "idle")
		excess--
		over--
	}
}

// fail records a worker that crashed or never became ready, and backs off further starts.
func (s *Scheduler) fail(es *epState, now time.Time, why string) {
	es.failures++
	es.failure = why
	d := s.cfg.BackoffMin << min(es.failures-1, 20)
	es.nextStart = now.Add(min(d, s.cfg.BackoffMax))
	s.cfg.Log.Warn("worker failed", "endpoint", es.ep.ID, "inARow", es.failures, "why", why, "nextStartIn", min(d, s.cfg.BackoffMax))
}

// publish hands the endpoint's condition to the job engine for /health and job status.
func (s *Scheduler) publish(es *epState) {
	c := core.Condition{Throttled: es.throttled, Suspended: es.parked,
		ColdStarts: es.cold.n, ColdStartLast: es.cold.last, ColdStartTotal: es.cold.total}
	switch {
	case es.failures > 0:
		c.Unhealthy = min(es.failures, max(es.ep.Workers.Max, 1))
		c.Reason = fmt.Sprintf("workers keep failing before they take a job (%d in a row; last: %s); next start at %s",
			es.failures, es.failure, es.nextStart.UTC().Format(time.RFC3339))
	case es.throttled > 0 && es.noRoom != nil:
		if !es.noRoom.same(es.noRoomOf) { // the message is built when it changes
			es.noRoomMsg, es.noRoomOf = "waiting for capacity: "+es.noRoom.Error(), es.noRoom
		}
		c.Reason = es.noRoomMsg
	}
	if es.ep.Type == core.TypeLoadBalancer {
		es.lbCounts(&c)
	}
	if c != es.lastCond {
		es.lastCond = c
		es.load.SetCondition(c)
	}
}

// startLocked starts one worker for the endpoint (resuming a suspended one first). es.mu is
// held; the pool call runs in the background.
func (s *Scheduler) startLocked(es *epState, now time.Time, code string) error {
	if s.closed.Load() || s.holding.Load() {
		return errors.New("the scheduler is closed or stopping")
	}
	if w := s.resumable(es); w != nil {
		w.state, w.startedAt, w.resumed, w.polled = phaseBooting, now, true, false
		es.recount()
		s.metrics.decision(es.ep.ID, "up", code)
		s.call(func(ctx context.Context) {
			if err := w.res.Pool().Resume(ctx, w.id); err != nil {
				s.cfg.Log.Warn("resuming a worker; starting a fresh one instead", "endpoint", es.ep.ID, "worker", w.id, "err", err)
				es.mu.Lock()
				s.stopLocked(w, "resume failed")
				es.mu.Unlock()
				return
			}
			if w.lb != nil {
				w.lb.state.Store(lbInit) // ready again once its health says so
				return
			}
			s.cfg.Jobs.ResumeWorker(w.id)
		})
		return nil
	}
	res, err := s.placer.Place(es.want)
	if err != nil {
		es.throttled++
		es.noRoom, _ = err.(*NoRoomError)
		s.reclaim(es.want)
		return err
	}
	ep := &es.ep
	id := ep.ID + "-" + core.NewID(8)
	w := &workerRec{id: id, es: es, res: res, gen: es.gen, state: phaseBooting, startedAt: now}
	spec := WorkerSpec{ID: id, Endpoint: ep.ID, Image: ep.Image, Args: ep.Args, Ports: ep.Ports, Disk: ep.Disk,
		GPUs: res.GPUs, Report: func(ev WorkerEvent) { s.event(w, ev) }}
	if ep.Registry != nil {
		spec.Registry = *ep.Registry
	}
	if ep.Type == core.TypeLoadBalancer {
		w.lb = &backend{w: w}
	}
	es.workers = append(es.workers, w)
	s.byID.Store(id, w)
	es.recount()
	s.metrics.decision(ep.ID, "up", code)
	epc := *ep // the environment is built off the tick, from this copy
	s.call(func(ctx context.Context) {
		if epc.Type == core.TypeLoadBalancer {
			s.lbSpec(&epc, res, &spec)
		} else {
			// The job engine's worker registry is shared by every Take and Done: registering
			// here keeps its lock out of the tick. The worker cannot poll (and so become
			// ready, when the tick first reads its activity) before it starts, below.
			token, act := s.cfg.Jobs.RegisterWorkerActivity(epc.ID, id)
			es.mu.Lock()
			w.act = act
			es.mu.Unlock()
			spec.Env = s.env(&epc, res, id, token)
		}
		if err := res.Pool().Start(ctx, spec); err != nil {
			s.cfg.Log.Error("starting a worker", "endpoint", spec.Endpoint, "pool", res.PoolID(), "image", spec.Image, "err", err)
			es.mu.Lock()
			s.fail(es, s.cfg.Clock.Now(), fmt.Sprintf("pool %s could not start it: %v", res.PoolID(), err))
			s.forgetLocked(w)
			es.mu.Unlock()
			s.cfg.Jobs.ForgetWorker(id)
			return
		}
		s.cfg.Log.Info("worker started", "endpoint", spec.Endpoint, "worker", id, "pool", res.PoolID(), "gpus", res.GPUs)
	})
	return nil
}

// call runs a pool call in the background, tracked by Close.
func (s *Scheduler) call(fn func(ctx context.Context)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn(s.ctx)
	}()
}

// resumable takes the endpoint's most recently suspended worker out of the suspended set.
func (s *Scheduler) resumable(es *epState) *workerRec {
	if es.suspended == 0 {
		return nil
	}
	var best *workerRec
	for _, w := range es.workers {
		if w.state == phaseSuspended && w.gen == es.gen && (best == nil || w.susAt.After(best.susAt)) {
			best = w
		}
	}
	if best == nil || !s.suspended.remove(best) {
		return nil // none, or being reclaimed
	}
	return best
}

// reclaim stops one suspended worker on a pool the want could use, to free its capacity:
// FLASHBOOT workers before PRIORITY_FLASHBOOT ones, the longest suspended first.
func (s *Scheduler) reclaim(want Want) {
	best := s.suspended.reclaimable(want.Pools)
	if best == nil {
		return
	}
	s.call(func(context.Context) { // another endpoint's lock: taken outside ours
		best.es.mu.Lock()
		defer best.es.mu.Unlock()
		if best.state == phaseSuspended {
			s.stopLocked(best, "its capacity is needed by another endpoint")
			s.metrics.decision(best.es.ep.ID, "down", "reclaimed")
		}
	})
}

// retireLocked takes an idle worker out of service: suspended when the endpoint uses
// FLASHBOOT (and the worker still matches it), stopped otherwise. The job engine first stops
// handing it jobs; if it took one meanwhile, it stays.
func (s *Scheduler) retireLocked(w *workerRec, why string, mayKeep bool) {
	es := w.es
	keep := mayKeep && es.ep.Flashboot != core.FlashbootOff && w.gen == es.gen &&
		es.parked < max(es.ep.Workers.Max, 1)
	prev := w.state
	w.state = phaseSuspending
	es.recount()
	s.cfg.Log.Info("scaling down", "endpoint", es.ep.ID, "worker", w.id, "reason", why, "suspend", keep)
	fenced := true
	if w.lb != nil {
		fenced = es.lbFence(w.lb)
	}
	s.call(func(ctx context.Context) {
		if !fenced || (w.lb == nil && !s.cfg.Jobs.SuspendWorker(w.id)) { // it took work after all
			es.mu.Lock()
			if w.state == phaseSuspending {
				w.state = prev
				es.recount()
			}
			es.mu.Unlock()
			return
		}
		var err error
		if keep {
			if err = w.res.Pool().Suspend(ctx, w.id); err != nil && !errors.Is(err, ErrUnsupported) {
				s.cfg.Log.Warn("suspending a worker; stopping it", "worker", w.id, "err", err)
			}
		}
		es.mu.Lock()
		defer es.mu.Unlock()
		if w.state != phaseSuspending {
			return // stopped meanwhile
		}
		if !keep || err != nil {
			s.stopLocked(w, why)
			return
		}
		w.state, w.susAt = phaseSuspended, s.cfg.Clock.Now()
		w.pinned = es.ep.Flashboot == core.FlashbootPriority
		es.recount()
		if w.lb != nil {
			w.lb.state.Store(lbSuspended)
		}
		s.suspended.add(w)
	})
}

// stopLocked stops a worker; its exit event forgets it. es.mu is held.
func (s *Scheduler) stopLocked(w *workerRec, why string) {
	if w.state == phaseStopping {
		return
	}
	if w.state == phaseSuspended {
		s.suspended.remove(w)
	}
	w.state, w.stopping = phaseStopping, true
	w.es.recount()
	s.cfg.Log.Info("stopping a worker", "endpoint", w.es.ep.ID, "worker", w.id, "reason", why)
	pool := w.res.Pool()
	s.call(func(ctx context.Context) {
		if err := pool.Stop(ctx, w.id); err != nil {
			s.cfg.Log.Error("stopping a worker", "worker", w.id, "err", err)
		}
	})
}

// forgetLocked drops a worker that is gone and gives its capacity back.
func (s *Scheduler) forgetLocked(w *workerRec) {
	if w.state == phaseSuspended {
		s.suspended.remove(w)
	}
	if i := slices.Index(w.es.workers, w); i >= 0 {
		w.es.workers = slices.Delete(w.es.workers, i, i+1)
	}
	s.byID.Delete(w.id)
	w.res.Release()
	w.es.recount()
	if w.lb != nil {
		w.lb.state.Store(lbDraining)
		if w.lb.cancel != nil {
			w.lb.cancel()
		}
		w.es.lbRebuild()
	}
}

// event applies a pool's report about a worker.
func (s *Scheduler) event(w *workerRec, ev WorkerEvent) {
	if ev.State == WorkerRunning && w.lb != nil {
		s.lbRunning(w, ev.Addrs)
	}
	if ev.State != WorkerExited {
		return
	}
	es := w.es
	es.mu.Lock()
	if !w.stopping && !w.polled {
		why := "it exited before taking a job"
		if ev.Err != nil {
			why = fmt.Sprintf("it exited before taking a job: %v", ev.Err)
		}
		s.fail(es, s.cfg.Clock.Now(), fmt.Sprintf("worker %s: %s", w.id, why))
		s.metrics.decision(es.ep.ID, "down", "crashed")
	}
	es.remember(w, ev, s.cfg.Clock.Now())
	s.forgetLocked(w)
	s.publish(es)
	es.mu.Unlock()
	s.cfg.Log.Info("worker exited", "endpoint", es.ep.ID, "worker", w.id, "err", ev.Err, "stopped", ev.Stopped)
	s.cfg.Jobs.ForgetWorker(w.id) // its jobs follow the worker-lost rule; this may call Demand
}

// env is the worker-protocol environment (notes/runpod-compat.md) over the endpoint's env.
// Every URL already carries a query, as the RunPod SDK appends with a bare '&'.
func (s *Scheduler) env(ep *core.Endpoint, res *Reservation, id, token string) map[string]string {
	env := maps.Clone(ep.Env)
	if env == nil {
		env = map[string]string{}
	}
	info := res.s.info
	q := "?gpu=" + url.QueryEscape(info.GPUType)
	base := s.cfg.BaseURL + "/v2/" + ep.ID
	for k, v := range map[string]string{
		"RUNPOD_WEBHOOK_GET_JOB":         base + "/job-take/" + id + q,
		"RUNPOD_WEBHOOK_POST_OUTPUT":     base + "/job-done/" + id + "/$ID" + q,
		"RUNPOD_WEBHOOK_POST_STREAM":     base + "/job-stream/" + id + "/$ID" + q,
		"RUNPOD_WEBHOOK_PING":            base + "/ping/" + id + q,
		"RUNPOD_POD_ID":                  id,
		"RUNPOD_AI_API_KEY":              token,
		"RUNPOD_ENDPOINT_ID":             ep.ID,
		"RUNPOD_GPU_COUNT":               strconv.Itoa(len(res.GPUs)),
		"RUNPOD_DC_ID":                   info.DataCenter,
		"RUNPOD_PING_INTERVAL":           strconv.FormatInt(PingInterval.Milliseconds(), 10),
		"RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true",
		"RUNPOD_SKIP_GPU_CHECK":          "true",
	} {
		env[k] = v
	}
	return env
}

// state returns an endpoint's state (tests).
func (s *Scheduler) state(id string) *epState {
	v, _ := s.eps.Load(id)
	es, _ := v.(*epState)
	return es
}
