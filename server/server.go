// Package server is Gantry's composition root: it builds the whole server (stores, job engine,
// scheduler, pools, webhooks, API, HTTP listener) from a Config, runs its background loops,
// and stops it gracefully. `gantry serve` calls it, and so do the tests and benchmarks that
// need a whole server, so that the wiring lives in one place.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/gantryhq/gantry/adapters/process"
	"github.com/gantryhq/gantry/api"
	"github.com/gantryhq/gantry/console"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/startstop"
	"github.com/gantryhq/gantry/lbproxy"
	"github.com/gantryhq/gantry/leader"
	"github.com/gantryhq/gantry/models"
	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/scheduler"
	"github.com/gantryhq/gantry/store/memq"
	"github.com/gantryhq/gantry/store/pebble"
	"github.com/gantryhq/gantry/telemetry"
	"github.com/gantryhq/gantry/webhook"
)

// DefaultListen and DefaultData are where a server listens and keeps its state when the
// config names neither.
const (
	DefaultListen = "127.0.0.1:8080"
	DefaultData   = "./gantry-data"
)

// Options are what a server takes besides its config: what `gantry serve` finds out about
// itself, and what tests replace.
type Options struct {
	// Log is the server's log; nil = slog.Default().
	Log *slog.Logger
	// Clock is the time every part reads; nil = the system clock.
	Clock core.Clock
	// Self is the binary the process pools run built-in workers with (`Self worker NAME`);
	// "" = this process's executable. Builtins are the names of those workers (image
	// gantry/NAME).
	Self     string
	Builtins []string
	// Pools, when set, are the scheduler's pools instead of those the config's pools make (an
	// in-process pool in tests); the config's pools are then their descriptions.
	Pools []pool.Pool
	// Listener, when set, is where the server serves instead of a listener on Config.Listen.
	Listener net.Listener
	// Tick is the autoscaler's tick; 0 = 1 s.
	Tick time.Duration
	// LeaseTTL is how long the leader's lease lasts unrenewed, with replicas on PostgreSQL;
	// 0 = leader.DefaultLeaseTTL (10 s). A lost leader is replaced within two of it.
	LeaseTTL time.Duration
	// ReplicaID names this replica among those sharing a store; "" = host name, process id
	// and a random part.
	ReplicaID string
}

// Server is a whole Gantry server. New builds it, listening but not yet serving; Start serves;
// Shutdown stops it gracefully; Close releases what it holds. Start, Shutdown and Close are
// called one at a time (from one goroutine, or in sequence); the accessors at any time.
type Server struct {
	cfg   Config
	log   *slog.Logger
	clock core.Clock
	tick  time.Duration

	ln       net.Listener
	st       *Stores
	files    *core.Files
	pools    []pool.Pool
	webhooks *webhook.Deliverer
	engine   *Engine
	api      *api.API
	http     *http.Server
	metrics  *prometheus.Registry // what /metrics serves

	// serveCtx is the base context of every request and background loop: long polls and
	// waits end when serving stops, so that a shutdown does not wait 30 s for them.
	serveCtx    context.Context
	stopServing context.CancelFunc
	background  sync.WaitGroup
	failed      chan error // the HTTP server's error when it stops on its own

	// elector keeps one replica the leader, on PostgreSQL (nil on the embedded store).
	elector *leader.Elector
	// roster keeps this replica on the list of live replicas, where the leader sends workers
	// (nil on the embedded store).
	roster *leader.Roster
	mgmt   *core.Management

	started, shutDown bool
	// closers release what New opened, in the reverse order of opening.
	closers []func()
}

// New builds a server from cfg: it validates cfg, discovers the local pool when cfg names no
// pools, opens the stores in cfg.Data, recovers the stored jobs, makes the pools, syncs the
// ready-made models' endpoints and listens. On an error it releases what it opened.
func New(ctx context.Context, cfg Config, opts Options) (_ *Server, err error) {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	clock := opts.Clock
	if clock == nil {
		clock = core.SystemClock{}
	}
	cfg.Listen = firstOf(cfg.Listen, DefaultListen)
	cfg.Data = firstOf(cfg.Data, DefaultData)
	if len(opts.Pools) > 0 {
		cfg.Pools = nil
		for _, p := range opts.Pools {
			cfg.Pools = append(cfg.Pools, PoolConfig{PoolInfo: p.Describe()})
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, err
	}
	quota := DefaultQuota
	if cfg.Quota != nil {
		quota = *cfg.Quota
	}
	if len(cfg.Pools) == 0 {
		inv := process.Discover(ctx)
		log.Info("local pool", "discovery", inv.Description)
		for _, p := range process.LocalPools(inv) {
			cfg.Pools = append(cfg.Pools, PoolConfig{PoolInfo: p})
		}
		cfg.devices = process.LocalDevices(inv)
	}

	s := &Server{cfg: cfg, log: log, clock: clock, tick: opts.Tick, failed: make(chan error, 1)}
	s.elector = &leader.Elector{Name: "scheduler", Holder: cmp.Or(opts.ReplicaID, replicaID()), TTL: opts.LeaseTTL, Log: log}
	if s.tick == 0 {
		s.tick = time.Second
	}
	s.serveCtx, s.stopServing = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.st, err = OpenStores(ctx, cfg, log); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.st.Close)
	s.files = &core.Files{Store: s.st.Files, Key: s.st.FileKey, TTL: cfg.FileTTL, Clock: s.clock,
		JobQuota: cfg.FileJobQuotaMB << 20, UserQuota: cfg.FileUserQuotaMB << 20}
	if err := s.listen(opts.Listener); err != nil {
		return nil, err
	}
	if err := s.build(ctx, quota, opts); err != nil {
		return nil, err
	}
	return s, nil
}

// listen opens the listener (or takes ln), and sets what depends on its address: the webhook
// policy's own addresses and the default public and peer URLs.
func (s *Server) listen(ln net.Listener) error {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.cfg.Listen); err != nil {
			return err
		}
	}
	s.ln = ln
	s.closers = append(s.closers, func() { _ = ln.Close() })
	s.cfg.Webhooks.ListensOn(ln.Addr())
	if s.cfg.PublicURL == "" {
		if s.cfg.PublicURL = listenURL(ln.Addr()); s.cfg.PublicURL == "" {
			return fmt.Errorf("publicUrl is required when listening on every interface (%s): the URLs handed out (requestUrls, file URLs, a Kubernetes pool's workerUrl) need an address clients can reach; set publicUrl (--public-url, GANTRY_PUBLIC_URL), e.g. http://gantry.example.com:%s",
				ln.Addr(), portOf(ln.Addr()))
		}
	}
	if s.cfg.PeerURL == "" {
		s.cfg.PeerURL = listenURL(ln.Addr())
	}
	return nil
}

// portOf returns the port of a listen address ("8080" when it names none).
func portOf(addr net.Addr) string {
	if _, port, err := net.SplitHostPort(addr.String()); err == nil && port != "" {
		return port
	}
	return "8080"
}

// listenURL is the default publicUrl and peerUrl of a server listening on addr: http://addr
// when addr names one host, "" (none) when it is every interface (0.0.0.0, [::]), which names
// no address a client or a peer can dial.
func listenURL(addr net.Addr) string {
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil || host == "" {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return ""
	}
	return "http://" + addr.String()
}

// build wires the job engine, the scheduler, the pools, the catalog, management and the API,
// recovers the stored jobs and syncs the ready-made models' endpoints.
func (s *Server) build(ctx context.Context, quota core.Quota, opts Options) error {
	cfg, log, clock := &s.cfg, s.log, s.clock
	// Started now, for the webhooks Recover finds undelivered; stopped before the store:
	// retries stop, and undelivered jobs stay marked for the restart. Not bound to serving, so
	// that the jobs a shutdown drains get theirs.
	s.webhooks = cfg.Webhooks.New(log)
	s.startService(context.Background(), s.webhooks)
	s.closers = append(s.closers, s.webhooks.Stop)

	templates := append(slices.Clone(BuiltinTemplates), cfg.Templates...)
	for i := range templates {
		if templates[i].CreatedAt.IsZero() {
			templates[i].CreatedAt = clock.Now().UTC().Truncate(time.Second) // public templates are as old as this server
		}
	}
	s.pools = opts.Pools
	if s.pools == nil {
		self := opts.Self
		if self == "" {
			var err error
			if self, err = os.Executable(); err != nil {
				return fmt.Errorf("finding this binary for built-in workers: %w", err)
			}
		}
		pools, err := newPools(ctx, cfg, self, opts.Builtins, log)
		if err != nil {
			return err
		}
		s.pools = pools
		s.closers = append(s.closers, func() { shutdownPools(cfg, pools, log) })
		for i, p := range pools { // what the adapters learnt (a cloud pool's CUDA versions, memory)
			cfg.Pools[i].PoolInfo = p.Describe()
		}
	}
	catalog := core.NewCatalog(cfg.catalogPools(), cfg.NetworkVolumes, templates)
	if err := checkVolumeStorage(s.pools, cfg.VolumeStorage); err != nil {
		return err
	}
	if s.st.Leases != nil { // replicas: each keeps local pools' volumes where it runs
		warnVolumeRoots(cfg, s.pools, log)
	}
	var mgmt *core.Management // the scheduler reads endpoints' volumes through it (set below)

	// Worker tokens are signed with a key kept in the store: they outlive a restart.
	tokens, err := core.NewWorkerTokens(ctx, s.st.Tokens, clock)
	if err != nil {
		return err
	}
	// The job store: memq's index and queues over Pebble's records. Opening it loads the stored
	// jobs; Recover applies the restart rules to them.
	jobStore, err := s.st.Jobs(ctx, memq.Options{Clock: clock, Log: log})
	if err != nil {
		return fmt.Errorf("loading stored jobs: %w", err)
	}
	observer, tracer, err := s.telemetry()
	if err != nil {
		return err
	}
	lbRequests := telemetry.NewLBRequests() // LOAD_BALANCER requests by endpoint and status
	workerBase := "http://" + loopback(s.ln.Addr().String())
	var replicas scheduler.ReplicaURLs // nil alone: every worker reaches this server
	if s.st.Leases != nil {
		// Replicas: the leader spreads its queue workers over every live replica's peerUrl.
		s.roster = &leader.Roster{Leases: s.st.Leases, Holder: s.elector.Holder, Address: cfg.PeerURL,
			Local: workerBase, TTL: s.elector.TTL, Log: log}
		replicas = s.roster
	}
	engine, err := NewEngine(EngineConfig{
		Jobs: core.JobsConfig{Store: jobStore, Clock: clock, Log: log, Tokens: tokens, Notify: s.webhooks,
			Meter: models.NewMeter(cfg.catalog, s.files), Usage: s.st.Usage, Observer: observer,
			History: s.st.History},
		Scheduler: scheduler.Config{Pools: s.pools, BaseURL: workerBase, Replicas: replicas, Clock: clock, Log: log,
			StableWindow: cfg.Autoscaler.StableWindow, PanicWindow: cfg.Autoscaler.PanicWindow,
			Source: s.st.Source, Tick: s.tick, Resync: 30 * time.Second,
			InitTimeout:   time.Duration(cfg.Autoscaler.InitTimeout) * time.Second,
			VolumeDC:      volumeDCs(func(ctx context.Context, id string) (core.Volume, error) { return mgmt.Volume(ctx, id) }),
			Volume:        func(ctx context.Context, id string) (core.Volume, error) { return mgmt.Volume(ctx, id) },
			VolumeStorage: cfg.VolumeStorage,
			Removed: func(id string) { // a deleted endpoint's series leave /metrics
				observer.Forget(id)
				lbRequests.Forget(id)
			}},
	})
	if err != nil {
		return err
	}
	s.engine = engine
	jobs, sched := engine.Jobs, engine.Scheduler
	if s.st.Leases == nil {
		s.elector = nil // the only replica: always the leader
	} else {
		s.elector.Leases = s.st.Leases
		s.elector.Address = cfg.PeerURL // the followers forward LOAD_BALANCER requests there
		sched.Follow()                  // until elected
		if cfg.PeerURL == "" {
			log.Warn("no peerUrl: listening on every interface names no address the other replicas can reach, so while another replica leads, this one answers LOAD_BALANCER requests 503; set peerUrl (--peer-url, GANTRY_PEER_URL)")
		}
	}
	// The history of the jobs that ended while the workers stopped is stored before the
	// stores close (closers run last first).
	s.closers = append(s.closers, func() {
		if err := jobs.FlushHistory(context.Background()); err != nil {
			log.Warn("storing history", "err", err)
		}
	})
	// The scheduler stops (every worker told to) before the stores close.
	s.closers = append(s.closers, s.stopWorkers)
	// Recover's restart rule (every running job's worker died with the server) holds only
	// for a server alone on its store. Replicas share running jobs: a replica starting must
	// not requeue the jobs other replicas' workers run. Their workers' silence in the store
	// (core.WorkerLostAfter) is what loses them (Jobs.Run on every replica).
	if s.st.Leases == nil {
		queued, requeued, err := jobs.Recover(ctx)
		if err != nil {
			return err
		}
		if queued+requeued > 0 {
			log.Info("recovered jobs", "queued", queued, "requeuedFromLostWorkers", requeued)
		}
	}
	catalog.Available = sched.Placer().Free
	catalog.Total = sched.Placer().Total
	catalog.Unhealthy = sched.Placer().Unhealthy // a pool whose cloud refuses its key says why
	catalog.CanRun = sched.Placer().CanRun       // an image no listed pool can run is refused (422)
	mgmt = &core.Management{
		Endpoints: s.st.Endpoints, Templates: s.st.Templates, Clock: clock, Catalog: catalog,
		Volumes: s.st.Volumes, VolumeBackend: volumeBackend{pools: s.pools, override: cfg.VolumeStorage},
		OnChange: sched.Set, // new scaling, bounds or GPUs take effect at once
		OnDelete: func(ctx context.Context, id string) {
			jobs.Purge(ctx, id) // a deleted endpoint's queue is cancelled, its workers stopped
			sched.Remove(id)
		},
	}
	s.mgmt = mgmt
	if err := syncModelEndpoints(ctx, mgmt, cfg.catalog, cfg.Pools[0].ID, log); err != nil {
		return err
	}
	modelCatalog := models.CoreCatalog(cfg.catalog)
	apiCfg := api.Config{
		Management: mgmt,
		Auth:       &core.Authenticator{Keys: s.st.Keys, Defaults: quota, Clock: clock},
		Limiter:    s.st.Limits,
		Jobs:       jobs,
		Balancer:   sched,
		Leader:     s.lbLeader,
		Fleet:      sched,
		LBHold:     time.Duration(cfg.Autoscaler.LBHold) * time.Second,
		LBObserver: lbRequests,
		Models:     modelCatalog,
		Billing:    &core.Billing{Usage: s.st.Usage, Models: modelCatalog},
		Files:      s.files,
		Clock:      clock,
		PublicURL:  cfg.PublicURL,
		Log:        log,
		Webhooks:   cfg.Webhooks.Policy(),

		ExpiredKeyGrace: cfg.ExpiredKeyGrace,
		StoreCheck:      s.st.Check,
	}
	if observer.Spans != nil {
		apiCfg.TracerProvider = tracer
	}
	cfg.Limits.apiLimits(&apiCfg)
	if s.api, err = api.New(apiCfg); err != nil {
		return err
	}

	s.metrics.MustRegister(sched.Collector(), s.webhooks.Collector(), s.api.Collector(), observer, lbRequests,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gantry_leader",
			Help: "Whether this replica leads: runs the autoscaler, placement and pools (1) or not (0)."}, func() float64 {
			if s.elector != nil {
				if _, ok := s.elector.Leading(); !ok {
					return 0
				}
			}
			return 1
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gantry_replicas",
			Help: "The live replicas sharing this one's store, as it last read their roster (1 alone): the leader spreads its queue workers over them."}, func() float64 {
			if s.roster == nil {
				return 1
			}
			urls, _ := s.roster.URLs()
			return float64(len(urls))
		}))
	gpus := &process.GPUSampler{} // one nvidia-smi run per interval for every process pool
	for _, p := range s.pools {
		if pp, ok := p.(*process.Pool); ok {
			if c := pp.Collector(gpus); c != nil { // its workers' GPU use
				s.metrics.MustRegister(c)
			}
		}
	}

	mux := http.NewServeMux()
	mux.Handle("/", s.api)
	mux.Handle("GET /metrics", metricsHandler(s.metrics, log))
	mux.Handle("/metrics", s.api.NotAllowed(api.HeadAllow)) // the other methods: 405 problem+json
	s.http = &http.Server{
		BaseContext:       func(net.Listener) context.Context { return s.serveCtx },
		Handler:           s.api.CleanPaths(console.Handler(mux)), // the web console at /
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	return nil
}

// telemetry builds the metrics registry, with the process's and Go runtime's own metrics, and
// the job engine's observer; with traces configured, the tracer provider that exports them
// (shut down, flushing the last spans, when the server closes).
func (s *Server) telemetry() (*telemetry.Jobs, *sdktrace.TracerProvider, error) {
	s.metrics = prometheus.NewRegistry()
	s.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	observer := telemetry.NewJobs()
	if !s.cfg.Telemetry.Enabled() {
		return observer, nil, nil
	}
	tp, err := telemetry.NewTracerProvider(s.cfg.Telemetry)
	if err != nil {
		return nil, nil, err
	}
	s.closers = append(s.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			s.log.Warn("flushing the last traces", "err", err)
		}
	})
	observer.Spans = telemetry.NewJobSpans(tp)
	s.log.Info("exporting traces", "otlpEndpoint", s.cfg.Telemetry.OTLPEndpoint)
	return observer, tp, nil
}

// Metrics is the registry /metrics serves.
func (s *Server) Metrics() *prometheus.Registry { return s.metrics }

// Start runs the background loops (job deadlines every 250 ms, the autoscaler every tick, the
// expired-files sweep every minute), serves HTTP and turns /healthz ready.
func (s *Server) Start() {
	if s.started {
		return
	}
	s.started = true
	jobs, sched := s.engine.Jobs, s.engine.Scheduler
	s.background.Go(func() { jobs.Run(s.serveCtx, 250*time.Millisecond) })
	s.background.Go(func() { jobs.RunHistory(s.serveCtx) }) // the endpoints' history, stored every second
	// The services start alike (startstop) and stop in stopServices (webhook delivery, started
	// by build, with the closers). The scheduler's autoscaler runs at once alone, or for each
	// term this replica leads: when serving stops, the elector releases the lease (another
	// replica leads at once) and the workers stop.
	s.startService(s.serveCtx, sched) // runs nothing while it follows: the elector leads it
	if s.elector != nil {
		s.elector.Lead = func(ctx context.Context, _ core.Lease) { sched.LeadTerm(ctx) }
		// The leader publishes its workers' figures for /health; the others show them.
		jobs.ShareFigures(func() (int64, bool) { l, ok := s.elector.Leading(); return l.Epoch, ok })
		s.startService(s.serveCtx, s.roster)
		s.startService(s.serveCtx, s.elector)
		// Every replica hears of the endpoints the others change: its job operations read
		// them afresh, and its scheduler (leading or not) knows them.
		if f, ok := s.st.Endpoints.(EndpointFollower); ok {
			s.background.Go(func() { f.FollowEndpoints(s.serveCtx, s.log, s.endpointChanged) })
		}
	}
	s.background.Go(func() { sweepFiles(s.serveCtx, s.files, time.Minute, s.log) })
	go func() {
		err := s.http.Serve(api.ProblemListener(s.ln, s.http.MaxHeaderBytes))
		if !errors.Is(err, http.ErrServerClosed) {
			s.failed <- err
		}
	}()
	s.api.SetReady(true)
}

// startService starts svc under ctx; Start guards against a second start, so an error here
// is a bug, logged.
func (s *Server) startService(ctx context.Context, svc startstop.Service) {
	if err := svc.Start(ctx); err != nil {
		s.log.Error("starting a service", "service", fmt.Sprintf("%T", svc), "err", err)
	}
}

// stopServices takes this replica off the roster, stops the elector (its term's autoscaler
// returns and the lease is released), then the scheduler (every worker is told to stop), and
// waits for the background loops. Webhook deliveries stop later, with the closers, before the
// stores close.
func (s *Server) stopServices() {
	if s.roster != nil {
		s.roster.Stop() // first: the leader moves the workers sent here elsewhere
	}
	if s.elector != nil {
		s.elector.Stop()
	}
	if s.engine != nil {
		s.engine.Scheduler.Stop()
	}
	s.background.Wait()
}

// endpointChanged applies a change another replica made to endpoint id ("" = to any of them).
func (s *Server) endpointChanged(ctx context.Context, id string) {
	s.mgmt.Forget(id)
	sched := s.engine.Scheduler
	if id == "" {
		if err := sched.Sync(ctx, s.st.Source); err != nil && ctx.Err() == nil {
			s.log.Warn("reading endpoints", "err", err)
		}
		return
	}
	e, err := s.st.Endpoints.GetEndpoint(ctx, id)
	switch {
	case err == nil:
		sched.Set(e)
	case errors.Is(err, core.ErrNotFound):
		sched.Remove(id)
	case ctx.Err() == nil:
		s.log.Warn("reading a changed endpoint", "endpoint", id, "err", err)
	}
}

// lbLeader says where LOAD_BALANCER requests are served (api.Config.Leader): here when this
// replica leads (or is alone), else at the leader's peer URL as the lease last named it.
func (s *Server) lbLeader() (self bool, holder, peerURL string) {
	if s.elector == nil {
		return true, "", ""
	}
	if _, ok := s.elector.Leading(); ok {
		return true, "", ""
	}
	l, _ := s.elector.Leader()
	return false, l.Holder, l.Address
}

// Failed receives the error that stopped serving, when it stops on its own (not by Shutdown).
func (s *Server) Failed() <-chan error { return s.failed }

// Shutdown stops the server gracefully (see graceful): no new requests or jobs, running jobs
// finish within the configured grace or go back in the queue, serving stops, then the workers.
// The end of ctx cuts the grace short (a second signal). Close releases the stores after it.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.shutDown {
		return nil
	}
	s.shutDown = true
	g := s.graceful()
	g.drainJobs(ctx.Done())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.stopServing()
	lbDone := make(chan error, 1) // the connections the load-balancing proxy took over, at the same time
	go func() { lbDone <- s.api.Shutdown(shutdownCtx) }()
	err := s.http.Shutdown(shutdownCtx)
	if lbErr := <-lbDone; err == nil {
		err = lbErr
	}
	s.stopServices() // ticks done, workers told to stop
	g.stopWorkers()  // their exits applied: the store can close
	if err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	return nil
}

// graceful is the server's graceful stop.
func (s *Server) graceful() *graceful {
	return &graceful{log: s.log, grace: s.cfg.Grace(), drain: func() { s.api.Drain(); s.engine.Scheduler.Hold() },
		jobs: s.engine.Jobs, sched: s.engine.Scheduler, exitWait: exitWait(&s.cfg)}
}

// stopWorkers ends serving and the background loops and stops every worker, waiting for their
// exits: after it nothing writes to the stores. Shutdown has done it already, when it ran.
func (s *Server) stopWorkers() {
	if s.shutDown {
		return
	}
	s.stopServing()
	if s.http != nil {
		_ = s.http.Close()
	}
	if s.api != nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the proxied connections close at once
		_ = s.api.Shutdown(ctx)
	}
	s.stopServices()
	(&graceful{log: s.log, sched: s.engine.Scheduler, exitWait: exitWait(&s.cfg)}).stopWorkers()
}

// Close releases what the server holds: without a Shutdown before it, it stops serving and the
// workers at once; then the pools' containers, the webhook deliveries and the stores.
func (s *Server) Close() {
	s.stopServing()
	for _, c := range slices.Backward(s.closers) {
		c()
	}
	s.closers = nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the server's base URL on its listener, e.g. http://127.0.0.1:8080.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Config is the config the server runs with, defaults and discovered pools filled in.
func (s *Server) Config() Config { return s.cfg }

// Handler is the server's whole HTTP handler (the API, /metrics and the console).
func (s *Server) Handler() http.Handler { return s.http.Handler }

// API is the server's API.
func (s *Server) API() *api.API { return s.api }

// Jobs is the server's job engine.
func (s *Server) Jobs() *core.Jobs { return s.engine.Jobs }

// Scheduler is the server's scheduler.
func (s *Server) Scheduler() *scheduler.Scheduler { return s.engine.Scheduler }

// Engine is the server's job engine and scheduler, wired together.
func (s *Server) Engine() *Engine { return s.engine }

// Store is the server's Pebble store; nil when it runs on PostgreSQL alone.
func (s *Server) Store() *pebble.Store { return s.st.Pebble }

// Keys is the server's store of API keys and users.
func (s *Server) Keys() core.KeyStore { return s.st.Keys }

// Leading reports whether this replica leads (runs the autoscaler and pools). On the embedded
// store it is the only replica and always leads.
func (s *Server) Leading() bool {
	if s.elector == nil {
		return true
	}
	_, ok := s.elector.Leading()
	return ok
}

// Pools are the scheduler's pools.
func (s *Server) Pools() []pool.Pool { return s.pools }

// loopback turns a listen address into one workers on this machine can dial.
func loopback(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// replicaID names this process among the replicas: host, process id and a random part (a
// restarted process is a new replica).
func replicaID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", cmp.Or(host, "gantry"), os.Getpid(), core.NewID(6))
}

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

var _ lbproxy.Observer = (*telemetry.LBRequests)(nil)
