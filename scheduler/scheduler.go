package scheduler

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/startstop"
	"github.com/gantryhq/gantry/pool"
)

// Defaults of Config.
const (
	DefaultInitTimeout = 7 * time.Minute // RunPod marks workers unhealthy after about as long
	DefaultBackoffMin  = time.Second
	DefaultBackoffMax  = 5 * time.Minute
	// RequestCountIdleGrace is how long a worker of a QUEUE endpoint scaling on REQUEST_COUNT
	// (which has no idleTimeout, spec 2.3) must be idle before scale-down retires it.
	RequestCountIdleGrace = core.DefaultIdleTimeout * time.Second
)

// EndpointSource is where the scheduler reads endpoints from at start and on resync.
type EndpointSource interface {
	ScanEndpoints(ctx context.Context, fn func(core.Endpoint) error) error
}

// JobEngine is what the scheduler uses of the job engine: the registry of the queue workers it
// runs and the load it scales on, both ports that core declares.
type JobEngine interface {
	core.WorkerRegistry
	core.LoadReader
}

// Config wires a Scheduler. Units and special values are on each field.
type Config struct {
	Jobs  JobEngine // the job engine; the scheduler subscribes to its worker signals and queued jobs
	Pools []pool.Pool
	// VolumeDC returns a network volume's data center: an endpoint's volumes pin its workers
	// there. nil = no volumes are known.
	VolumeDC func(id string) (string, bool)
	// Volume returns a network volume by id, for the workers of endpoints naming it to see it
	// at core.VolumeMountPath (volumes.go); nil = volumes only pin placement.
	Volume func(ctx context.Context, id string) (core.Volume, error)
	// VolumeStorage names, per data center, the pool that stores its volumes (config
	// volumeStorage); a data center absent stores them in its first pool that can.
	VolumeStorage map[string]string
	// Removed, when set, is called with the id of each endpoint Remove dropped (deleted here,
	// on another replica, or found missing by Sync), after its workers were told to stop: the
	// series other components keep of it (the job metrics) go too.
	Removed func(endpoint string)
	// BaseURL is where workers reach Gantry, e.g. "http://127.0.0.1:8080".
	BaseURL string
	// Replicas, when set, lists the replicas sharing the store: each queue worker started is
	// given the URL of the one with the fewest workers instead of BaseURL, and a worker whose
	// replica leaves the list is stopped (replicas.go). nil = every worker reaches BaseURL.
	Replicas ReplicaURLs
	Clock    core.Clock
	Log      *slog.Logger
	// InitTimeout stops a worker that has not polled for a job this long after it started;
	// 0 = DefaultInitTimeout.
	InitTimeout time.Duration
	// BackoffMin and BackoffMax bound the delay before the next start after workers crash
	// before taking a job (doubling per crash in a row); 0 = the defaults.
	BackoffMin, BackoffMax time.Duration
	// StableWindow and PanicWindow are the autoscaler's windows in ticks; 0 = StableWindow
	// (60) and PanicWindow (6).
	StableWindow, PanicWindow int
	// Source is where Start (and each term's Lead) reads the endpoints; Tick is how often it
	// ticks (0 = 1 s) and Resync how often it reads them all again (0 = 30 s).
	Source       EndpointSource
	Tick, Resync time.Duration
}

// Scheduler runs every endpoint's workers: it autoscales them between workers.min and
// workers.max by the endpoint's scaling policy, places them on pools with lock-free
// reservations, suspends and resumes them (FLASHBOOT), and reports what it cannot do on
// /health. Tick is one autoscaler pass; Demand starts a worker at once for the first job on an
// endpoint scaled to zero; the job engine's worker signals end cold starts and report lost
// workers.
type Scheduler struct {
	cfg    Config
	placer *Placer
	eps    sync.Map // endpoint id -> *epState
	byID   sync.Map // worker id -> *workerRec
	listMu sync.Mutex
	list   atomic.Pointer[[]*epState] // every endpoint, for Tick; replaced (copied) on change
	// tickWaits makes every tick wait for each endpoint's lock instead of passing a busy one
	// by, and for the worker signals being applied (tryApplySignals): the scheduler's own
	// tests set it, so that a tick's decisions do not depend on a pool call or health poll
	// holding the lock at that instant.
	tickWaits bool

	suspended suspendedWorkers

	healthOnce sync.Once
	healthRT   http.RoundTripper // LOAD_BALANCER health checks

	ctx     context.Context // pool calls; cancelled by Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup // pool calls in flight
	pollers sync.WaitGroup // LOAD_BALANCER health pollers, one per running worker

	// The job engine's signals about workers (ready, lost), applied by watchWorkers and at the
	// start of each Tick (signals.go).
	signals   *core.WorkerSignals
	sigMu     sync.Mutex          // held while signals taken are applied
	sigBuf    []core.WorkerSignal // under sigMu
	watching  sync.WaitGroup      // watchWorkers
	closed    atomic.Bool
	holding   atomic.Bool // Hold: no worker starts or resumes (shutdown.go)
	following atomic.Bool // Follow: another replica leads; none start here (leader.go)
	// bases counts the workers sent to each replica; replicasSeen is the roster version the
	// last tick checked the workers against (replicas.go).
	bases        baseCounts
	replicasSeen atomic.Uint64

	metrics metrics
	learn   learner         // endpoints Acquire has not heard of yet (learn.go)
	run     startstop.Group // Start's autoscaler loop (service.go)
}

// epState is one endpoint as the scheduler runs it. mu guards everything but active.
type epState struct {
	// First, together, what a tick reads to pass a quiet endpoint by: ticks walk every
	// endpoint, and under load each cache line a tick misses costs.
	mu sync.Mutex
	// busyTicks counts the ticks in a row that found mu held and passed the endpoint by.
	busyTicks  atomic.Int32
	deleted    bool
	queueType  bool // ep.Type == core.TypeQueue
	queueDelay bool // ep.Scaling.Type == core.ScaleQueueDelay: the tick reads the oldest job's wait
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
	exited    []exitedWorker // the last few workers that exited, oldest first (workerinfo.go)

	// refusal is why a pool last refused a start for now (ErrNoCapacity: a cloud with no
	// machine, a cost cap): the endpoint shows as throttled, not failing, and asks again
	// after refusedUntil.
	refusal      string
	refusedUntil time.Time
}

// New returns a scheduler over the pools. It subscribes to the job engine's worker signals and
// applies them in a goroutine of its own until Close.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Jobs == nil {
		return nil, errors.New("scheduler: Jobs is required")
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
	// A job queued at an endpoint with no worker starts one at once, not at the next tick.
	if err := cfg.Jobs.ListenAvailable(s.ctx, s.Demand); err != nil {
		s.cancel()
		return nil, fmt.Errorf("scheduler: listening for queued jobs: %w", err)
	}
	s.signals = cfg.Jobs.SubscribeWorkers()
	s.watching.Add(1)
	go s.watchWorkers()
	return s, nil
}

// Placer returns the scheduler's placer (its pools' free capacity).
func (s *Scheduler) Placer() *Placer { return s.placer }

// Set adds an endpoint or applies its new settings: scaling, worker bounds and GPU choice take
// effect at the next tick; workers running an old image, env or GPU choice are replaced as
// they become idle.
func (s *Scheduler) Set(ep core.Endpoint) { s.set(ep, true) }

// setIfAbsent is Set for an endpoint the scheduler does not know: one it knows meanwhile (a
// change that arrived since it was read) is left as it is.
func (s *Scheduler) setIfAbsent(ep core.Endpoint) { s.set(ep, false) }

// set is Set; with !update, an endpoint already known is left as it is.
func (s *Scheduler) set(ep core.Endpoint, update bool) {
	defer s.endpointSet()
	v, loaded := s.eps.LoadOrStore(ep.ID, &epState{ep: ep, queueType: ep.Type == core.TypeQueue,
		queueDelay: ep.Scaling.Type == core.ScaleQueueDelay, scaler: newScaler(s.cfg.StableWindow, s.cfg.PanicWindow), load: s.cfg.Jobs.LoadCounter(ep.ID)})
	es := v.(*epState)
	if loaded && !update {
		return
	}
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
	es.queueDelay = ep.Scaling.Type == core.ScaleQueueDelay
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

// revision names what workers started for ep run (the fields workerSpecChanged compares), so
// that a restarted scheduler adopts only workers that still match their endpoint.
func revision(ep *core.Endpoint) string {
	b, _ := json.Marshal(struct {
		Image, Args                       string
		Env                               map[string]string // encoded with sorted keys
		Disk                              int
		Ports, Pools                      []string
		Count                             int
		DataCenters, CUDA, NetworkVolumes []string
	}{ep.Image, ep.Args, ep.Env, ep.Disk, ep.Ports, ep.GPU.Pools, ep.GPU.Count, ep.DataCenterIDs, ep.AllowedCudaVersions, ep.NetworkVolumes})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// Remove stops every worker of a deleted endpoint, suspended ones too, and drops its series
// from the metrics.
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
	s.metrics.forget(id) // its series leave /metrics; its workers, stopping, count no more
	if s.cfg.Removed != nil {
		s.cfg.Removed(id)
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

// syncAndReap reads the endpoints, then adopts or stops the workers the pools list but this
// scheduler did not start (reap), which needs the endpoints.
func (s *Scheduler) syncAndReap(ctx context.Context, src EndpointSource) {
	if err := s.Sync(ctx, src); err != nil && ctx.Err() == nil {
		s.cfg.Log.Error("reading endpoints before adopting the workers left behind", "err", err)
	}
	s.reap(ctx)
}

// Run first adopts or stops the workers its pools list but it did not start (see reap), then ticks
// every interval and resyncs endpoints from src every resync, until ctx ends; then it stops
// every worker and waits for them.
func (s *Scheduler) Run(ctx context.Context, src EndpointSource, interval, resync time.Duration) {
	s.useSource(src)
	s.syncAndReap(ctx, src)
	s.loop(ctx, src, interval, resync)
	s.Close()
}

// loop is Run without the reap at its start and the Close at its end: it ticks and resyncs
// until ctx ends.
func (s *Scheduler) loop(ctx context.Context, src EndpointSource, interval, resync time.Duration) {
	if err := s.Sync(ctx, src); err != nil && ctx.Err() == nil {
		s.cfg.Log.Error("reading endpoints", "err", err)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
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
	s.watching.Wait()
	s.signals.Unsubscribe() // nothing reads them any more
}

// state returns an endpoint's state (tests).
func (s *Scheduler) state(id string) *epState {
	v, _ := s.eps.Load(id)
	es, _ := v.(*epState)
	return es
}
