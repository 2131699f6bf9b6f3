package main

// In-process benchmarks of Gantry's job path, for CPU and heap profiles: the same wiring as
// `gantry serve` (api.New, core.Jobs, the Pebble store, scheduler.Queues and scheduler.Scheduler)
// behind an httptest server on loopback, with echo workers run as goroutines by an in-process
// pool instead of processes. The bench command runs them with -cpuprofile for each
// scenario that misses its target; by hand:
//
//	go test ./bench -run '^$' -bench '^BenchmarkRun$' -benchtime 5s -cpuprofile /tmp/run.prof -o /tmp/bench.test
//	go tool pprof -top /tmp/bench.test /tmp/run.prof
//	BENCH_HEAPPROFILE=/tmp/heap.prof go test ./bench -run '^$' -bench '^BenchmarkQueuedMemory$' -benchtime 1x
//	go tool pprof -top -sample_index=inuse_space /tmp/heap.prof
//
// BENCH_NO_DEMAND=1 leaves scheduler.Scheduler.Demand unwired (an experiment: what /run costs
// without the on-demand worker start; the autoscaler tick still starts workers).

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/scheduler"
	"github.com/gantryhq/gantry/store/keydir"
	"github.com/gantryhq/gantry/store/pebble"
	"github.com/gantryhq/gantry/worker"
	"github.com/gantryhq/gantry/worker/echo"
	"github.com/gantryhq/gantry/worker/httpecho"
)

// engine is Gantry's job path in process.
type engine struct {
	srv  *httptest.Server
	jobs *core.Jobs
	pool *inprocPool
	key  string
}

// newEngine wires an engine as cmd/gantry's serve does; it stops when tb ends.
func newEngine(tb testing.TB) *engine {
	tb.Helper()
	dir := tb.TempDir()
	st, err := pebble.Open(filepath.Join(dir, "pebble"))
	if err != nil {
		tb.Fatal(err)
	}
	keys, err := keydir.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	clock := core.SystemClock{}
	log := slog.New(slog.DiscardHandler)
	queues := &scheduler.Queues{}
	jobs := core.NewJobs(core.JobsConfig{Store: st, Dispatch: queues, Clock: clock, Log: log})
	pools := []core.Pool{{ID: "local", Adapter: "process", GPUType: "CPU", DisplayName: "CPU slot", GPUs: 256,
		PerWorker: 1, DataCenter: "LOCAL", CPU: true, VCPUs: runtime.NumCPU(), MemoryPerCPU: 1}}
	templates := []core.Template{{ID: "gantry-echo", Name: "Gantry echo worker", IsServerless: true,
		CreatedAt: time.Now().UTC().Truncate(time.Second), Container: core.Container{Image: "gantry/echo"}},
		{ID: "gantry-http-echo", Name: "Gantry HTTP echo worker (LOAD_BALANCER)", IsServerless: true,
			CreatedAt: time.Now().UTC().Truncate(time.Second), Container: core.Container{Image: "gantry/http-echo", Ports: []string{"80/http"}}}}
	pool := &inprocPool{info: pools[0], ws: map[string]*inprocWorker{}}
	srv := httptest.NewUnstartedServer(nil) // its listener is open: workers get its address
	sched, err := scheduler.New(scheduler.Config{Jobs: jobs, Queues: queues, Pools: []scheduler.Pool{pool}, Clock: clock, Log: log,
		BaseURL: "http://" + srv.Listener.Addr().String()})
	if err != nil {
		tb.Fatal(err)
	}
	a, err := api.New(api.Config{
		Management: &core.Management{Endpoints: st, Templates: st, Clock: clock, Catalog: core.NewCatalog(pools, nil, templates),
			OnChange: sched.Set},
		Auth:      &core.Authenticator{Keys: keys, Clock: clock}, // zero quota: unlimited, as --quota-* 0
		Limiter:   &core.RateLimiter{},
		Jobs:      jobs,
		Balancer:  sched,
		Fleet:     sched,
		Clock:     clock,
		PublicURL: "http://127.0.0.1",
		Log:       log,
	})
	if err != nil {
		tb.Fatal(err)
	}
	serveCtx, stopServing := context.WithCancel(context.Background())
	srv.Config.Handler = a
	srv.Config.BaseContext = func(net.Listener) context.Context { return serveCtx }
	srv.Start()
	a.SetReady(true)

	if os.Getenv("BENCH_NO_DEMAND") == "" {
		queues.OnEnqueue = sched.Demand // as cmd/gantry wires it
	}
	var background sync.WaitGroup
	background.Go(func() { jobs.Run(serveCtx, 250*time.Millisecond) })
	background.Go(func() { sched.Run(serveCtx, st, 100*time.Millisecond, time.Minute) })

	secret := core.NewKeySecret()
	now := time.Now().UTC()
	if err := keys.PutUser(context.Background(), core.User{Name: "bench", CreatedAt: now}); err != nil {
		tb.Fatal(err)
	}
	if err := keys.PutKey(context.Background(), core.Key{ID: "key_" + core.NewID(10), Hash: core.HashKey(secret), User: "bench",
		Scope: core.ScopeAll, CreatedAt: now}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stopServing()
		background.Wait()
		srv.Close()
		st.Close()
		keys.Close()
	})
	return &engine{srv: srv, jobs: jobs, pool: pool, key: secret}
}

// endpoint creates an echo endpoint through the management API and waits for min idle workers.
func (e *engine) endpoint(tb testing.TB, min, max int) string {
	tb.Helper()
	g := &gantry{server: &server{base: e.srv.URL}, key: e.key}
	id, err := g.createEndpoint("bench", min, max)
	if err != nil {
		tb.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for e.jobs.Health(id).Idle < min {
		if time.Now().After(deadline) {
			tb.Fatalf("%d idle workers wanted; health %+v", min, e.jobs.Health(id))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return id
}

// inprocPool runs each worker as worker.Run with the echo handler in a goroutine, with the
// environment the process pool would hand a worker process; a LOAD_BALANCER worker (a spec
// with PortEnv) is httpecho.Run on free loopback ports instead.
type inprocPool struct {
	info core.Pool
	mu   sync.Mutex
	ws   map[string]*inprocWorker
}

type inprocWorker struct {
	cancel   context.CancelFunc
	stopped  atomic.Bool
	addr     string // a LOAD_BALANCER worker's PORT: host:port
	endpoint string
}

// lbAddr returns where the endpoint's LOAD_BALANCER worker listens (PORT), if it has one.
func (p *inprocPool) lbAddr(endpoint string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.ws {
		if w.endpoint == endpoint && w.addr != "" {
			return w.addr
		}
	}
	return ""
}

func (p *inprocPool) Describe() core.Pool { return p.info }

func (p *inprocPool) Start(ctx context.Context, spec scheduler.WorkerSpec) error {
	if len(spec.PortEnv) > 0 {
		return p.startHTTP(ctx, spec)
	}
	ping, _ := strconv.Atoi(spec.Env[worker.EnvPingInterval])
	cfg := worker.Config{
		TakeURL: spec.Env[worker.EnvTakeURL], DoneURL: spec.Env[worker.EnvDoneURL], StreamURL: spec.Env[worker.EnvStreamURL],
		PingURL: spec.Env[worker.EnvPingURL], Token: spec.Env[worker.EnvToken], WorkerID: spec.ID,
		PingInterval: time.Duration(ping) * time.Millisecond,
		Client:       &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}, // a process has its own
		Log:          slog.New(slog.DiscardHandler),
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &inprocWorker{cancel: cancel}
	p.mu.Lock()
	p.ws[spec.ID] = w
	p.mu.Unlock()
	spec.Report(scheduler.WorkerEvent{Worker: spec.ID, State: scheduler.WorkerRunning, At: time.Now()})
	go func() {
		err := worker.Run(ctx, cfg, echo.Handler)
		p.mu.Lock()
		delete(p.ws, spec.ID)
		p.mu.Unlock()
		if w.stopped.Load() {
			err = nil
		}
		spec.Report(scheduler.WorkerEvent{Worker: spec.ID, State: scheduler.WorkerExited, At: time.Now(), Err: err, Stopped: w.stopped.Load()})
	}()
	return nil
}

// startHTTP runs a LOAD_BALANCER worker: gantry/http-echo on a free loopback port for each
// port the spec asks for, as the process pool gives a worker process free host ports.
func (p *inprocPool) startHTTP(_ context.Context, spec scheduler.WorkerSpec) error {
	addrs := map[int]string{}
	ports := map[string]string{}
	for name, want := range spec.PortEnv {
		if addrs[want] == "" {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			addrs[want] = ln.Addr().String()
			ln.Close()
		}
		_, ports[name], _ = net.SplitHostPort(addrs[want])
	}
	cfg := httpecho.Config{Port: ports["PORT"], HealthPort: cmp.Or(ports["PORT_HEALTH"], ports["PORT"]),
		HealthPath: cmp.Or(spec.Env["HEALTH_CHECK_PATH"], "/ping"), WorkerID: spec.ID, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	w := &inprocWorker{cancel: cancel, addr: net.JoinHostPort("127.0.0.1", cfg.Port), endpoint: spec.Endpoint}
	p.mu.Lock()
	p.ws[spec.ID] = w
	p.mu.Unlock()
	spec.Report(scheduler.WorkerEvent{Worker: spec.ID, State: scheduler.WorkerRunning, At: time.Now(), Addrs: addrs})
	go func() {
		err := httpecho.Run(ctx, cfg)
		p.mu.Lock()
		delete(p.ws, spec.ID)
		p.mu.Unlock()
		if w.stopped.Load() {
			err = nil
		}
		spec.Report(scheduler.WorkerEvent{Worker: spec.ID, State: scheduler.WorkerExited, At: time.Now(), Err: err, Stopped: w.stopped.Load()})
	}()
	return nil
}

func (p *inprocPool) Stop(_ context.Context, id string) error {
	p.mu.Lock()
	w := p.ws[id]
	p.mu.Unlock()
	if w != nil {
		w.stopped.Store(true)
		w.cancel()
	}
	return nil
}

func (p *inprocPool) Suspend(context.Context, string) error { return scheduler.ErrUnsupported }
func (p *inprocPool) Resume(context.Context, string) error  { return scheduler.ErrUnsupported }

var _ scheduler.Pool = (*inprocPool)(nil)

// BenchmarkRun is scenario 1 in process: durable /run from 64 concurrent keep-alive clients to
// an endpoint with workers.max 0.
func BenchmarkRun(b *testing.B) {
	e := newEngine(b)
	ep := e.endpoint(b, 0, 0)
	url, body := e.srv.URL+"/v2/"+ep+"/run", jsonInput(100)
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		p := newPoster(url, e.key, body)
		defer p.close()
		for pb.Next() {
			if ok, err := p.do(); !ok || err != nil {
				b.Errorf("run = %s, %v", p.body, err)
				return
			}
		}
	})
}

// BenchmarkRunSync is scenario 2 in process: sequential /runsync with one warm echo worker.
func BenchmarkRunSync(b *testing.B) {
	e := newEngine(b)
	ep := e.endpoint(b, 1, 1)
	url, body := e.srv.URL+"/v2/"+ep+"/runsync", []byte(`{"input":{"echo":1}}`)
	p := newPoster(url, e.key, body)
	defer p.close()
	for range 100 {
		_, _ = p.do()
	}
	b.ResetTimer()
	for range b.N {
		if ok, err := p.do(); !ok || err != nil || !strings.Contains(string(p.body), "COMPLETED") {
			b.Fatalf("runsync = %s, %v", p.body, err)
		}
	}
}

// BenchmarkE2E is scenario 3 in process: b.N /run jobs from 64 clients through 64 echo
// workers, timed until the engine counts them all completed.
func BenchmarkE2E(b *testing.B) {
	e := newEngine(b)
	const workers, clients = 64, 64
	ep := e.endpoint(b, workers, workers)
	url, body := e.srv.URL+"/v2/"+ep+"/run", []byte(`{"input":{"echo":1}}`)
	base := e.jobs.Health(ep).Completed
	b.ResetTimer()
	start := time.Now()
	if r := burst(url, e.key, body, b.N, clients, nil); r.Errors > 0 {
		b.Fatalf("%d of %d submissions failed", r.Errors, b.N)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for e.jobs.Health(ep).Completed < base+int64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("not all jobs completed: %+v", e.jobs.Health(ep))
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
}

// BenchmarkQueuedMemory is scenario 4 in process: BENCH_MEM_JOBS (default 200,000) /run jobs
// with 1 KB inputs queued on an endpoint with workers.max 0; it reports the live heap per
// queued job and writes a heap profile to BENCH_HEAPPROFILE when set. Run it with -benchtime 1x.
func BenchmarkQueuedMemory(b *testing.B) {
	n := 200000
	if v, err := strconv.Atoi(os.Getenv("BENCH_MEM_JOBS")); err == nil && v > 0 {
		n = v
	}
	e := newEngine(b)
	ep := e.endpoint(b, 0, 0)
	url, body := e.srv.URL+"/v2/"+ep+"/run", jsonInput(1024)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for range b.N {
		r := burst(url, e.key, body, n, 64, nil)
		if r.Errors > 0 {
			b.Fatalf("%d of %d submissions failed", r.Errors, n)
		}
	}
	b.StopTimer()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	queued := e.jobs.Health(ep).InQueue
	b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(queued), "heap-B/queued-job")
	b.ReportMetric(float64(queued), "queued")
	if path := os.Getenv("BENCH_HEAPPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(os.Stderr, "heap profile of %d queued jobs: %s\n", queued, path)
	}
}
