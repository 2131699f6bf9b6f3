package runpod

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/adapters/kit"
	"github.com/gantryhq/gantry/adapters/runpod/rpapi"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// DefaultAPI is RunPod's REST API.
const DefaultAPI = "https://api.runpod.io"

// Defaults of Config.
const (
	DefaultPoll         = 5 * time.Second
	DefaultCatalogEvery = time.Minute
	DefaultDisk         = 20 // GB
	DefaultInstallation = "gantry"
)

// Environment variables every pod of the pool carries, by which a restarted Gantry knows its
// pods (RunPod pods have no labels).
const (
	EnvInstallation = "GANTRY_INSTALLATION"
	EnvPool         = "GANTRY_POOL"
	EnvWorker       = "GANTRY_WORKER"
	EnvEndpoint     = "GANTRY_ENDPOINT"
)

// Config configures a Pool. It is also a runpod pool's section in the config file
// (pools[].runpod, required, with apiKeyEnv and publicUrl): the fields with a yaml key are
// read from there, and Build fills in the others from the pool's description and the server.
// New validates it once.
type Config struct {
	// Pool describes the pool as the catalog shows it. ID is required; GPUType is RunPod's GPU
	// type id ("NVIDIA GeForce RTX 4090"); GPUs is the most GPUs the pool rents at once (> 0):
	// the ceiling of its capacity, which RunPod's stock and the cost guard may lower (see
	// Capacity); PerWorker the most one pod may take (0 = RunPod's maxCount for the type, at
	// most GPUs). CUDAVersions, when set, are the versions pods may run (sent as
	// allowedCudaVersions, and the catalog's stock is read for them); empty = those the
	// catalog offers for the type. MemoryGB and DisplayName come from the catalog when unset;
	// DataCenter defaults to the first of DataCenters, else "RUNPOD". Adapter defaults to
	// "runpod".
	Pool core.PoolInfo `yaml:"-"`
	// API is RunPod's REST API base URL; "" = DefaultAPI.
	API string `yaml:"api"`
	// APIKeyEnv names the environment variable that holds the RunPod API key. Required; the
	// variable must be set (the key itself is never in the config).
	APIKeyEnv string `yaml:"apiKeyEnv"`
	// PublicURL is where workers in RunPod's cloud reach Gantry's worker API: the scheme, host
	// and optional path prefix of a reverse proxy or tunnel in front of Gantry, e.g.
	// "https://gantry.example.com". It must be https; plain http is accepted only for a
	// loopback host (tests). Required.
	PublicURL string `yaml:"publicUrl"`
	// Cloud is "SECURE" (the default) or "COMMUNITY".
	Cloud string `yaml:"cloud"`
	// DataCenters are the RunPod data centers pods may be placed in, in order of preference;
	// empty = any.
	DataCenters []string `yaml:"dataCenters"`
	// Disk is a pod's container disk in GB when the endpoint asks for none; 0 = DefaultDisk.
	Disk int `yaml:"disk"`
	// Registries maps the registry credential ids endpoints name to the ids of container
	// registry credentials stored at RunPod (which pods pull private images with). A spec
	// naming a credential not here fails to start.
	Registries map[string]string `yaml:"registries"`
	// Installation names this Gantry installation in its pods' environment and names, so that
	// a restarted Gantry finds its own pods (and leaves other installations' alone);
	// "" = DefaultInstallation.
	Installation string `yaml:"installation"`
	// MaxPods caps the pods the pool keeps at once, suspended ones included; 0 = no cap but
	// the pool's GPUs.
	MaxPods int `yaml:"maxPods"`
	// MaxSpendPerHour caps what the pool's running pods cost together, in USD per hour at the
	// catalog's list prices (price per GPU times GPUs); 0 = no cap. A start over either cap is
	// refused as throttled.
	MaxSpendPerHour float64 `yaml:"maxSpendPerHour"`
	// Poll is how often the pool lists pods while it has workers; 0 = DefaultPoll. Answers
	// that ask it to slow down (429, Retry-After, RateLimit with nothing remaining) make it
	// wait longer.
	Poll time.Duration `yaml:"poll"`
	// CatalogEvery is how often the pool reads the GPU catalog again (stock and prices);
	// 0 = DefaultCatalogEvery.
	CatalogEvery time.Duration `yaml:"catalogEvery"`
	// Stock is how many GPUs the pool takes RunPod to have free for it at each availability
	// level its catalog reports ("LOW", "MEDIUM", "HIGH"; RunPod gives a level, not a count).
	// A level not set here counts as: LOW = one pod's GPUs (PerWorker), MEDIUM = half of
	// Pool.GPUs (at least one pod's), HIGH = Pool.GPUs. NONE is always 0.
	Stock map[string]int `yaml:"stock"`
	// HTTPClient makes the API calls; nil = a client with its own transport.
	HTTPClient *http.Client `yaml:"-"`
	// Clock stamps events; nil = the system clock.
	Clock core.Clock `yaml:"-"`
	// Log receives what the pool does outside its events; nil = slog.Default().
	Log *slog.Logger `yaml:"-"`
}

// Pool is the RunPod adapter's pool.Pool. See the package documentation.
type Pool struct {
	desc  core.PoolInfo
	cfg   Config
	api   *rpapi.Client // for the pool's methods
	bg    *rpapi.Client // for the watch loop, on connections of its own (see newClients)
	clock core.Clock
	log   *slog.Logger
	live  *kit.Live[*worker]

	ctx    context.Context // the pool's life: the watch loop and background calls
	cancel context.CancelFunc
	done   chan struct{} // closed when the watch loop has returned
	kick   chan struct{} // wakes the watch loop for a poll now
	// recheck asks the watch loop for a list even with no workers: a create failed in a way
	// that may have left a pod behind.
	recheck atomic.Bool

	admitMu sync.Mutex // makes the cost guard's check and a worker's registration one step

	mu      sync.Mutex
	gpu     gpuInfo // from the catalog
	health  error   // why the API refuses the pool's calls (401, 403); nil = none
	catalog time.Time

	volumes sync.Map // Gantry volume id -> its RunPod volume id, as found (volume.go)
}

// gpuInfo is what the catalog says of the pool's GPU type.
type gpuInfo struct {
	name     string
	memory   int
	price    float64 // USD per GPU per hour in the pool's cloud
	maxCount int
	// stock is the availability level for the pool (its cloud, its data centers, its CUDA
	// versions): NONE, LOW, MEDIUM or HIGH; "" until the catalog was read.
	stock string
	held  int      // GPUs of the pool's pods when stock was read: the stock is free besides them
	cuda  []string // versions the catalog offers for the type (with free machines or not)
}

// apiTimeout bounds each call the pool makes in the background.
const apiTimeout = time.Minute

var (
	_ pool.Pool           = (*Pool)(nil)
	_ pool.Elastic        = (*Pool)(nil)
	_ pool.HealthReporter = (*Pool)(nil)
	_ pool.WorkerLister   = (*Pool)(nil)
)

// Adapter is the RunPod adapter as the config file names it (adapter: runpod).
var Adapter = kit.Adapter[Config]{Name: "runpod", Build: Build,
	// Shutdown terminates the pool's pods (no rented GPU outlives Gantry): RunPod's terminate
	// answers within seconds, retried on errors.
	Grace: func(*Config) time.Duration { return 30 * time.Second }}

// Build makes a runpod pool from its description and its section, which it requires, with
// the logger of env.
func Build(ctx context.Context, env kit.Env, desc core.PoolInfo, c *Config) (pool.Pool, error) {
	if c == nil {
		return nil, fmt.Errorf("adapter runpod needs a runpod section (apiKeyEnv, publicUrl)")
	}
	cfg := *c
	cfg.Pool, cfg.Log = desc, env.Log
	return New(ctx, cfg)
}

// New returns a pool renting pods through the RunPod API, or what is wrong with cfg. It reads
// the GPU catalog for the pool's type (its capacity, memory, CUDA versions and price). The
// pods an earlier run of this installation left for the pool are listed by Workers, for the
// scheduler to stop (it does when it starts running). A RunPod that refuses the key (401, 403) does
// not fail New: the pool starts unhealthy, refuses starts with the reason, and recovers when
// a later call succeeds.
func New(ctx context.Context, cfg Config) (*Pool, error) {
	d, errs := kit.CheckPool(cfg.Pool, "runpod", nil, 0)
	if cfg.APIKeyEnv == "" {
		errs = append(errs, errors.New("apiKeyEnv: name the environment variable that holds the RunPod API key"))
	}
	key := ""
	if cfg.APIKeyEnv != "" {
		if key = os.Getenv(cfg.APIKeyEnv); key == "" {
			errs = append(errs, fmt.Errorf("apiKeyEnv: the environment variable %s is empty or not set", cfg.APIKeyEnv))
		}
	}
	if err := checkPublicURL(cfg.PublicURL); err != nil {
		errs = append(errs, err)
	}
	cfg.Cloud = cmp.Or(cfg.Cloud, "SECURE")
	if cfg.Cloud != "SECURE" && cfg.Cloud != "COMMUNITY" {
		errs = append(errs, fmt.Errorf("cloud %q; want SECURE or COMMUNITY", cfg.Cloud))
	}
	if d.CPU {
		errs = append(errs, errors.New("CPU pools are not supported on RunPod yet: give a GPU type"))
	}
	if cfg.Disk < 0 || cfg.MaxPods < 0 || cfg.MaxSpendPerHour < 0 || cfg.Poll < 0 || cfg.CatalogEvery < 0 {
		errs = append(errs, errors.New("disk, maxPods, maxSpendPerHour, poll and catalogEvery must not be negative"))
	}
	for level, n := range cfg.Stock {
		if (level != "LOW" && level != "MEDIUM" && level != "HIGH") || n < 0 {
			errs = append(errs, fmt.Errorf("stock %s: %d: want LOW, MEDIUM or HIGH, each a count of GPUs >= 0", level, n))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("runpod pool %q: %w", d.ID, err)
	}
	cfg.API = strings.TrimRight(cmp.Or(cfg.API, DefaultAPI), "/")
	cfg.Disk = cmp.Or(cfg.Disk, DefaultDisk)
	cfg.Installation = cmp.Or(cfg.Installation, DefaultInstallation)
	cfg.Poll = cmp.Or(cfg.Poll, DefaultPoll)
	cfg.CatalogEvery = cmp.Or(cfg.CatalogEvery, DefaultCatalogEvery)
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	d.DataCenter = cmp.Or(d.DataCenter, first(cfg.DataCenters), "RUNPOD")
	api, bg, err := newClients(cfg, key)
	if err != nil {
		return nil, fmt.Errorf("runpod pool %q: API URL %q: %w", d.ID, cfg.API, err)
	}
	pctx, cancel := context.WithCancel(context.Background())
	p := &Pool{desc: d, cfg: cfg, api: api, bg: bg, clock: cmp.Or[core.Clock](cfg.Clock, core.SystemClock{}),
		log: cmp.Or(cfg.Log, slog.Default()).With("pool", d.ID), live: kit.NewLive[*worker](0),
		ctx: pctx, cancel: cancel, done: make(chan struct{}), kick: make(chan struct{}, 1)}
	if err := p.readCatalog(ctx); err != nil && !isAuth(err) {
		cancel()
		return nil, fmt.Errorf("runpod pool %q: %w", d.ID, err)
	}
	go p.watch()
	return p, nil
}

// newClients returns the API clients of the pool's methods and of its watch loop. They pace
// their requests together, but keep their connections apart (unless cfg.HTTPClient is set):
// the watch loop's busy connections would otherwise keep alive the goroutines of connections
// a method dialled.
func newClients(cfg Config, key string) (api, bg *rpapi.Client, err error) {
	g := &gate{}
	client := func() (*rpapi.Client, error) {
		hc := cfg.HTTPClient
		if hc == nil {
			hc = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 8,
				IdleConnTimeout: idleConnTimeout, TLSHandshakeTimeout: 10 * time.Second}}
		}
		pace := &pacer{next: cmp.Or[http.RoundTripper](hc.Transport, http.DefaultTransport), gate: g}
		hc = &http.Client{Transport: pace, Timeout: hc.Timeout, Jar: hc.Jar, CheckRedirect: hc.CheckRedirect}
		return rpapi.NewClient(cfg.API, apiKey(key), rpapi.WithClient(hc))
	}
	if api, err = client(); err != nil {
		return nil, nil, err
	}
	bg, err = client()
	return api, bg, err
}

// idleConnTimeout is how long the pool keeps an idle connection to the API: its calls come in
// bursts, and short-lived idle connections bound the goroutines they hold.
const idleConnTimeout = time.Second

// checkPublicURL says what is wrong with the URL workers reach Gantry at.
func checkPublicURL(s string) error {
	if s == "" {
		return errors.New("publicUrl: required: where workers in RunPod's cloud reach Gantry (https://...)")
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("publicUrl %q: want scheme://host[:port][/prefix]", s)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if ip := net.ParseIP(u.Hostname()); (ip != nil && ip.IsLoopback()) || u.Hostname() == "localhost" {
			return nil
		}
	}
	return fmt.Errorf("publicUrl %q: workers reach Gantry over the internet, so it must be https (http only for a loopback host, in tests)", s)
}

// completeDescription fills what the config left to the catalog. p.mu is held.
func (p *Pool) completeDescription() {
	g := p.gpu
	p.desc.DisplayName = cmp.Or(p.desc.DisplayName, g.name, p.desc.GPUType)
	p.desc.MemoryGB = cmp.Or(p.desc.MemoryGB, g.memory)
	if p.desc.PerWorker == 0 && g.maxCount > 0 {
		p.desc.PerWorker = min(g.maxCount, p.desc.GPUs)
	}
}

// Describe returns the pool's description (a copy): its GPUs are its count, the ceiling of
// Capacity (which says how many it may hold now); its CUDA versions those of the config, else
// those the catalog offers for the type, as last read.
func (p *Pool) Describe() core.PoolInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.desc
	if len(d.CUDAVersions) == 0 {
		d.CUDAVersions = p.gpu.cuda
	}
	d.CUDAVersions = slices.Clone(d.CUDAVersions)
	return d
}

// Capacity returns how many GPUs the pool's pods may hold in all now (implements
// pool.Elastic): the lowest of the pool's count, what the cost guard allows (maxPods
// pods of PerWorker GPUs; maxSpendPerHour at the catalog's price per GPU), and, once the
// catalog was read, the GPUs the pool held then plus those its stock level counts as free
// (Config.Stock). It answers from the last catalog read.
func (p *Pool) Capacity() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.desc.GPUs
	if p.cfg.MaxPods > 0 {
		n = min(n, p.cfg.MaxPods*p.desc.GPUsPerWorkerMax())
	}
	if p.cfg.MaxSpendPerHour > 0 && p.gpu.price > 0 {
		n = min(n, int(p.cfg.MaxSpendPerHour/p.gpu.price+1e-9))
	}
	if p.gpu.stock != "" {
		n = min(n, p.gpu.held+p.stockGPUs(p.gpu.stock))
	}
	return max(n, 0)
}

// stockGPUs is how many GPUs a stock level counts as free (see Config.Stock). p.mu is held.
func (p *Pool) stockGPUs(level string) int {
	if level == "NONE" {
		return 0
	}
	if n, ok := p.cfg.Stock[level]; ok {
		return n
	}
	per := p.desc.GPUsPerWorkerMax()
	switch level {
	case "LOW":
		return per
	case "MEDIUM":
		return max(per, (p.desc.GPUs+1)/2)
	}
	return p.desc.GPUs
}

// perPod is the most GPUs one pod of the pool may have.
func (p *Pool) perPod() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.desc.GPUsPerWorkerMax()
}

// Health says why the pool cannot rent pods now: RunPod refused its key (401) or the key's
// permission (403). nil when the last call succeeded.
func (p *Pool) Health() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.health
}

// noteHealth records whether a call was refused for the key.
func (p *Pool) noteHealth(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case isAuth(err):
		if p.health == nil {
			p.log.Error("RunPod refuses the pool's API key; the pool is unhealthy", "err", err)
		}
		p.health = fmt.Errorf("RunPod refuses the API key in $%s: %w", p.cfg.APIKeyEnv, err)
	case err == nil:
		p.health = nil
	}
}

// Close stops the watch loop. It terminates no pod: Shutdown does.
func (p *Pool) Close() error {
	p.cancel()
	<-p.done
	return nil
}

// Shutdown terminates every pod of the pool's workers (as Gantry exits, so that no rented GPU
// is left running) and waits for their exits, or until ctx is done.
func (p *Pool) Shutdown(ctx context.Context) error {
	var errs []error
	for _, w := range p.live.All() {
		if err := p.Stop(ctx, w.id); err != nil {
			errs = append(errs, err)
		}
	}
	for _, w := range p.live.All() {
		select {
		case <-w.gone:
		case <-ctx.Done():
			return fmt.Errorf("runpod pool %s: %d workers still being terminated: %w", p.desc.ID, len(p.live.All()), ctx.Err())
		}
	}
	return errors.Join(errs...)
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// apiKey is the bearer key of every call.
type apiKey string

func (k apiKey) BearerAuth(context.Context, rpapi.OperationName) (rpapi.BearerAuth, error) {
	return rpapi.BearerAuth{Token: string(k)}, nil
}

var (
	_ pool.Pool           = (*Pool)(nil)
	_ pool.Elastic        = (*Pool)(nil)
	_ pool.HealthReporter = (*Pool)(nil)
	_ pool.LogSource      = (*Pool)(nil)
	_ pool.WorkerLister   = (*Pool)(nil)
	_ pool.WorkerURLOwner = (*Pool)(nil)
)
