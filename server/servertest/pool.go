package servertest

import (
	"cmp"
	"context"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/worker"
	"github.com/gantryhq/gantry/worker/echo"
	"github.com/gantryhq/gantry/worker/httpecho"
)

// Pool runs each worker as worker.Run with the echo handler in a goroutine, with the
// environment the process pool would hand a worker process; a LOAD_BALANCER worker (a spec
// with PortEnv) is httpecho.Run on free loopback ports instead.
type Pool struct {
	info core.PoolInfo
	mu   sync.Mutex
	ws   map[string]*poolWorker
}

// NewPool returns an in-process pool that info describes.
func NewPool(info core.PoolInfo) *Pool { return &Pool{info: info, ws: map[string]*poolWorker{}} }

// LocalPool returns an in-process pool "local" of slots CPU slots, as the process adapter
// describes a machine without GPUs.
func LocalPool(slots int) *Pool {
	return NewPool(core.PoolInfo{ID: "local", Adapter: "process", GPUType: "CPU", DisplayName: "CPU slot", GPUs: slots,
		PerWorker: 1, DataCenter: "LOCAL", CPU: true, VCPUs: runtime.NumCPU(), MemoryPerCPU: 1})
}

// poolWorker is one worker the pool runs.
type poolWorker struct {
	cancel   context.CancelFunc
	stopped  atomic.Bool
	addr     string // a LOAD_BALANCER worker's PORT: host:port
	endpoint string
}

// LBAddr returns where the endpoint's LOAD_BALANCER worker listens (PORT), if it has one.
func (p *Pool) LBAddr(endpoint string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.ws {
		if w.endpoint == endpoint && w.addr != "" {
			return w.addr
		}
	}
	return ""
}

// Describe returns the pool's description.
func (p *Pool) Describe() core.PoolInfo { return p.info }

// Start runs a worker in a goroutine and reports it running at once.
func (p *Pool) Start(ctx context.Context, spec pool.WorkerSpec) error {
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
	w := &poolWorker{cancel: cancel}
	p.mu.Lock()
	p.ws[spec.ID] = w
	p.mu.Unlock()
	spec.Report(pool.WorkerEvent{Worker: spec.ID, State: pool.WorkerRunning, At: time.Now()})
	go func() {
		err := worker.Run(ctx, cfg, echo.Handler)
		p.mu.Lock()
		delete(p.ws, spec.ID)
		p.mu.Unlock()
		if w.stopped.Load() {
			err = nil
		}
		spec.Report(pool.WorkerEvent{Worker: spec.ID, State: pool.WorkerExited, At: time.Now(), Err: err, Stopped: w.stopped.Load()})
	}()
	return nil
}

// startHTTP runs a LOAD_BALANCER worker: gantry/http-echo on a free loopback port for each
// port the spec asks for, as the process pool gives a worker process free host ports.
func (p *Pool) startHTTP(_ context.Context, spec pool.WorkerSpec) error {
	addrs := map[int]string{}
	ports := map[string]string{}
	for name, want := range spec.PortEnv {
		if addrs[want] == "" {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			addrs[want] = ln.Addr().String()
			_ = ln.Close()
		}
		_, ports[name], _ = net.SplitHostPort(addrs[want])
	}
	cfg := httpecho.Config{Host: "127.0.0.1", Port: ports["PORT"], HealthPort: cmp.Or(ports["PORT_HEALTH"], ports["PORT"]),
		HealthPath: cmp.Or(spec.Env["HEALTH_CHECK_PATH"], "/ping"), WorkerID: spec.ID, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	w := &poolWorker{cancel: cancel, addr: net.JoinHostPort("127.0.0.1", cfg.Port), endpoint: spec.Endpoint}
	p.mu.Lock()
	p.ws[spec.ID] = w
	p.mu.Unlock()
	spec.Report(pool.WorkerEvent{Worker: spec.ID, State: pool.WorkerRunning, At: time.Now(), Addrs: addrs})
	go func() {
		err := httpecho.Run(ctx, cfg)
		p.mu.Lock()
		delete(p.ws, spec.ID)
		p.mu.Unlock()
		if w.stopped.Load() {
			err = nil
		}
		spec.Report(pool.WorkerEvent{Worker: spec.ID, State: pool.WorkerExited, At: time.Now(), Err: err, Stopped: w.stopped.Load()})
	}()
	return nil
}

// Stop ends a worker; its exit is reported when its goroutine returns.
func (p *Pool) Stop(_ context.Context, id string) error {
	p.mu.Lock()
	w := p.ws[id]
	p.mu.Unlock()
	if w != nil {
		w.stopped.Store(true)
		w.cancel()
	}
	return nil
}

// Suspend is not supported: FLASHBOOT stops the workers instead.
func (p *Pool) Suspend(context.Context, string) error { return pool.ErrUnsupported }

// Resume is not supported, as Suspend is not.
func (p *Pool) Resume(context.Context, string) error { return pool.ErrUnsupported }

var _ pool.Pool = (*Pool)(nil)
