package api_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/lbproxy"
	"github.com/gantryhq/gantry/models"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/store/filedir"
	"github.com/gantryhq/gantry/store/keydir"
	"github.com/gantryhq/gantry/store/memq"
	"github.com/gantryhq/gantry/store/pebble"
	"github.com/gantryhq/gantry/webhook"
)

// t0 is 15 s into a minute, 15 s into an hour (10:00:15 UTC): minute t=45, hour t=3585,
// day t=50385.
var t0 = time.Date(2026, 11, 21, 10, 0, 15, 0, time.UTC)

// testPools is the catalog every API test runs against.
var testPools = []core.PoolInfo{
	{ID: "a100-eu", Adapter: "process", GPUType: "NVIDIA A100 80GB PCIe", DisplayName: "A100 80GB", MemoryGB: 80,
		GPUs: 8, PerWorker: 4, CUDAVersions: []string{"12.4", "12.6"}, DataCenter: "EU-RO-1"},
	{ID: "h100-us", Adapter: "process", GPUType: "NVIDIA H100 80GB HBM3", DisplayName: "H100 80GB", MemoryGB: 80,
		GPUs: 2, CUDAVersions: []string{"12.8"}, DataCenter: "US-TX-3"},
	{ID: "cpu", Adapter: "process", GPUType: "CPU", DisplayName: "CPU slot", GPUs: 4, PerWorker: 1,
		DataCenter: "LOCAL", CPU: true, VCPUs: 8, MemoryPerCPU: 2},
}

var testTemplates = []core.Template{
	{ID: "tpl-pub", Name: "public serverless", IsServerless: true, AllowedCudaVersions: []string{"12.4"},
		StartSSH: true, StartJupyter: true,
		Container: core.Container{Image: "example/worker:1", Args: "--serve", Disk: 20, Ports: []string{"8000/http"},
			Env: map[string]string{"A": "template", "B": "template"}}},
	{ID: "tpl-pod", Name: "a pod template", IsServerless: false, Container: core.Container{Image: "example/pod:1"}},
}

// env is one test's running API and its users' keys.
type env struct {
	t      testing.TB
	srv    *httptest.Server
	api    *api.API
	clock  *testkit.Clock
	keys   *keydir.Dir
	engine *core.Jobs
	// alice has a full-access key, bob another user's; read and jobs are alice's scoped keys.
	alice, bob, read, jobs, expired string
}

type setupOpts struct {
	quota    core.Quota
	balancer core.Balancer
	models   bool // serve the built-in ready-made models (metered, with a file store)
	// fileJobQuota sets the file store's Files.JobQuota (0 = the default).
	fileJobQuota int64
	// base, when set, is the server's base context, as gantry serve sets one it cancels when
	// it stops serving.
	base context.Context
	// canRun, when set, tells which images the pools can run (nil: every pool runs any).
	canRun core.ImageRunner
	// webhooks is where job webhooks may go (default: public addresses only).
	webhooks webhook.Policy
	// bodyTimeout and bodyBudget set Config.BodyReadTimeout and Config.BodyBudget (0 = defaults).
	bodyTimeout time.Duration
	bodyBudget  int64
	// limiter counts requests (nil = the in-memory core.RateLimiter).
	limiter core.RateLimits
	// leader is Config.Leader (nil: this replica always leads).
	leader func() (self bool, holder, peerURL string)
	// jobStore, when set, wraps the job store the engine runs over.
	jobStore func(core.JobStore) core.JobStore
	// keyStore, when set, wraps the key directory the server authenticates with.
	keyStore func(core.KeyStore) core.KeyStore
	// storeCheck is Config.StoreCheck (nil: none).
	storeCheck func(context.Context) error
	// lbObserver is Config.LBObserver (nil: none).
	lbObserver lbproxy.Observer
	// volumes is where network volumes' data lives (nil: no pool stores volumes).
	volumes core.VolumeBackend
}

func setup(t testing.TB, opts ...setupOpts) *env {
	t.Helper()
	o := setupOpts{quota: core.Quota{Minute: 1000, Hour: 10000, Day: 100000}}
	if len(opts) > 0 {
		o = opts[0]
	}
	dir := t.TempDir()
	st, err := pebble.Open(dir + "/pebble")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keys, err := keydir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(keys.Close)
	clock := testkit.NewClock(t0)
	js, err := st.Jobs(memq.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	var jstore core.JobStore = js
	if o.jobStore != nil {
		jstore = o.jobStore(js)
	}
	jc := core.JobsConfig{Store: jstore, Clock: clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), History: st}
	var authKeys core.KeyStore = keys
	if o.keyStore != nil {
		authKeys = o.keyStore(keys)
	}
	cfg := api.Config{
		Auth:            &core.Authenticator{Keys: authKeys, Defaults: o.quota, Clock: clock},
		StoreCheck:      o.storeCheck,
		Limiter:         o.limiter,
		Clock:           clock,
		PublicURL:       "https://gantry.example",
		TakeWait:        300 * time.Millisecond,
		Balancer:        o.balancer,
		Leader:          o.leader,
		LBObserver:      o.lbObserver,
		LBHold:          time.Second,
		BodyReadTimeout: o.bodyTimeout,
		BodyBudget:      o.bodyBudget,
		Webhooks:        o.webhooks,
		Log:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if cfg.Limiter == nil {
		cfg.Limiter = &core.RateLimiter{}
	}
	var specs []models.Spec
	if o.models {
		fd, err := filedir.Open(dir + "/files")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Files = &core.Files{Store: fd, Key: []byte("0123456789abcdef0123456789abcdef"), Clock: clock, JobQuota: o.fileJobQuota}
		specs = models.Builtin
		cfg.Models = models.CoreCatalog(specs)
		cfg.Billing = &core.Billing{Usage: st, Models: cfg.Models}
		jc.Meter, jc.Usage = models.NewMeter(specs, cfg.Files), st
	}
	// The job engine as the server wires it; its scheduler has no pools and is told of no
	// endpoint, so no worker starts: the tests play the workers over the worker API.
	engine, err := server.NewEngine(server.EngineConfig{Jobs: jc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(engine.Scheduler.Close)
	jobs := engine.Jobs
	cfg.Jobs = jobs
	cfg.Management = &core.Management{Endpoints: st, Templates: st, Volumes: st, VolumeBackend: o.volumes, Clock: clock, OnDelete: func(ctx context.Context, id string) { jobs.Purge(ctx, id) },
		Catalog: core.NewCatalog(testPools, []core.NetworkVolume{{ID: "vol-eu", DataCenter: "EU-RO-1", SizeGB: 10}}, testTemplates)}
	cfg.Management.Catalog.CanRun = o.canRun
	for _, s := range specs {
		if _, err := cfg.Management.PutPlatformEndpoint(context.Background(), s.Endpoint("cpu")); err != nil {
			t.Fatal(err)
		}
	}
	a, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.SetReady(true)
	srv := httptest.NewUnstartedServer(a)
	if o.base != nil {
		srv.Config.BaseContext = func(net.Listener) context.Context { return o.base }
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		// httptest's Close leaves the server's other listeners open: the load-balancing loop's
		// handoff (connections it gives back) stays served. gantry serve's Shutdown ends it.
		_ = srv.Config.Close()
	})
	e := &env{t: t, srv: srv, api: a, clock: clock, keys: keys, engine: jobs}
	e.alice = e.newKey("alice", core.ScopeAll, nil, nil)
	e.bob = e.newKey("bob", core.ScopeAll, nil, nil)
	e.read = e.newKey("alice", core.ScopeRead, nil, nil)
	e.jobs = e.newKey("alice", core.ScopeJobs, []string{"ep-allowed"}, nil)
	past := t0.Add(-time.Minute)
	e.expired = e.newKey("alice", core.ScopeAll, nil, &past)
	return e
}

func (e *env) newKey(user string, scope core.Scope, endpoints []string, expires *time.Time) string {
	e.t.Helper()
	secret := core.NewKeySecret()
	k := core.Key{ID: core.NewID(8), Hash: core.HashKey(secret), User: user, Scope: scope, Endpoints: endpoints, ExpiresAt: expires}
	if err := e.keys.PutKey(context.Background(), k); err != nil {
		e.t.Fatal(err)
	}
	return secret
}

// response is a completed HTTP exchange.
type response struct {
	status int
	header http.Header
	body   string
}

// json decodes the body into a generic value.
func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

// errors returns the problem body's errors list.
func (r response) errors(t *testing.T) []string {
	t.Helper()
	var p struct {
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return p.Errors
}

// do sends a request with the given Authorization header value ("" = none) and a JSON body.
func (e *env) do(method, path, auth, body string) response {
	e.t.Helper()
	ctype := ""
	if body != "" {
		ctype = "application/json"
	}
	return e.doRaw(method, path, auth, ctype, body)
}

// as sends a request with a bearer key.
func (e *env) as(key, method, path, body string) response {
	e.t.Helper()
	return e.do(method, path, "Bearer "+key, body)
}

// create creates an endpoint as alice and returns its id, failing the test unless 201.
func (e *env) create(body string) string {
	e.t.Helper()
	r := e.as(e.alice, "POST", "/v2/serverless", body)
	if r.status != http.StatusCreated {
		e.t.Fatalf("create = %d %s; want 201", r.status, r.body)
	}
	return r.json(e.t)["id"].(string)
}

const minimalQueue = `{"name":"ep","type":"QUEUE","image":"example/worker:1","gpu":{"pools":["a100-eu"]},"scaling":{"type":"QUEUE_DELAY","queueDelay":4}}`

// doRaw sends a request with an explicit Content-Type ("" = none).
func (e *env) doRaw(method, path, auth, ctype, body string) response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// json2 decodes a body that is a JSON array of objects.
func (r response) json2(t *testing.T) []map[string]any {
	t.Helper()
	var v []map[string]any
	if err := json.Unmarshal([]byte(r.body), &v); err != nil {
		t.Fatalf("body %q is not a JSON array: %v", r.body, err)
	}
	return v
}
