package runpod

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/adapters/adaptertest"
	"github.com/gantryhq/gantry/adapters/runpod/rpapi"
	"github.com/gantryhq/gantry/adapters/runpod/runpodfake"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/scheduler"
)

// idle runs containers that do nothing until stopped: for tests about the API, not the
// workers.
type idle struct{}

func (idle) Run(runpodfake.ContainerSpec) (runpodfake.Container, error) {
	return &idleCtr{done: make(chan struct{})}, nil
}

type idleCtr struct {
	once sync.Once
	done chan struct{}
}

func (c *idleCtr) Done() <-chan struct{} { return c.done }
func (c *idleCtr) ExitCode() int         { return 0 }
func (c *idleCtr) Stop(time.Duration)    { c.once.Do(func() { close(c.done) }) }

// fixture is a pool on a fake cloud of idle containers, with a recorder for its events.
type fixture struct {
	t     *testing.T
	cloud *cloud
	pool  *Pool
	rec   *adaptertest.Recorder
	n     int
}

func setup(t *testing.T, cfg Config, fake runpodfake.Config) *fixture {
	t.Helper()
	if fake.Runner == nil {
		fake.Runner = idle{}
	}
	c := newCloud(t, fake)
	f := &fixture{t: t, cloud: c, pool: newPool(t, c, cfg), rec: &adaptertest.Recorder{}}
	t.Cleanup(func() { // before the pool's cleanup, which checks that no pod is left
		for _, w := range f.pool.live.All() {
			_ = f.pool.Stop(context.Background(), w.id)
			f.rec.Wait(t, w.id, pool.WorkerExited, testkit.WaitTimeout)
		}
	})
	return f
}

func (f *fixture) spec() pool.WorkerSpec {
	f.n++
	return pool.WorkerSpec{ID: "w" + string(rune('0'+f.n)), Endpoint: "ep", Image: testImage, Args: "serves",
		GPUs: []int{f.n - 1}, Report: f.rec.Report}
}

func (f *fixture) start(spec pool.WorkerSpec) {
	f.t.Helper()
	if err := f.pool.Start(context.Background(), spec); err != nil {
		f.t.Fatalf("Start(%s) = %v", spec.ID, err)
	}
	f.rec.Wait(f.t, spec.ID, pool.WorkerRunning, testkit.WaitTimeout)
}

func (f *fixture) stop(id string) {
	f.t.Helper()
	if err := f.pool.Stop(context.Background(), id); err != nil {
		f.t.Fatal(err)
	}
	f.rec.Wait(f.t, id, pool.WorkerExited, testkit.WaitTimeout)
}

// client is a RunPod client of the fake, for acting on pods behind the pool's back.
func (c *cloud) client(t *testing.T) *rpapi.Client {
	t.Helper()
	api, _, err := newClients(Config{API: c.URL}, testKey)
	if err != nil {
		t.Fatal(err)
	}
	return api
}

func TestStartSendsThePodRequest(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{Pool: core.PoolInfo{CUDAVersions: []string{"12.8", "12.4"}}, PublicURL: "https://gantry.example.com/edge/",
		Cloud: "COMMUNITY", DataCenters: []string{"EU-RO-1", "US-TX-3"}, Disk: 30, Registries: map[string]string{"ghcr": "rp-reg-7"}},
		runpodfake.Config{GPUs: []runpodfake.GPU{func() runpodfake.GPU { g := gpu4090; g.DataCenters = []string{"US-TX-3"}; return g }()}})
	spec := f.spec()
	spec.GPUs = []int{0, 1}
	spec.Registry = "ghcr"
	spec.Ports = []string{"8888/http"}
	spec.PortEnv = map[string]int{"PORT": 8000, "PORT_HEALTH": 8000}
	spec.Env = map[string]string{
		"RUNPOD_WEBHOOK_GET_JOB": "http://127.0.0.1:8080/v2/ep/job-take/w1?gpu=RTX",
		"RUNPOD_WEBHOOK_PING":    "http://127.0.0.1:8080/v2/ep/ping/w1?gpu=RTX",
		"RUNPOD_AI_API_KEY":      "gw_token", "MODEL": "llama",
	}
	f.start(spec)
	pod, ok := f.cloud.podOf(spec.ID)
	if !ok {
		t.Fatal("no pod for the worker")
	}
	for k, want := range map[string]string{
		"RUNPOD_WEBHOOK_GET_JOB": "https://gantry.example.com/edge/v2/ep/job-take/w1?gpu=RTX",
		"RUNPOD_WEBHOOK_PING":    "https://gantry.example.com/edge/v2/ep/ping/w1?gpu=RTX",
		"RUNPOD_AI_API_KEY":      "gw_token", "MODEL": "llama", "PORT": "8000", "PORT_HEALTH": "8000",
		EnvInstallation: DefaultInstallation, EnvPool: f.pool.desc.ID, EnvWorker: spec.ID,
	} {
		if got := pod.Env[k]; got != want {
			t.Errorf("pod env %s = %q; want %q", k, got, want)
		}
	}
	if pod.Image != testImage || pod.Args != "serves" || pod.GPU != gpu4090.ID || pod.GPUs != 2 || pod.Cloud != "COMMUNITY" ||
		pod.Registry != "rp-reg-7" || pod.Disk != 30 || !slices.Equal(pod.CUDA, []string{"12.4", "12.8"}) ||
		!slices.Equal(pod.DataCenters, []string{"EU-RO-1", "US-TX-3"}) || !slices.Equal(pod.Ports, []string{"8000/tcp", "8888/http"}) {
		t.Errorf("pod %+v; want the spec's image, args, 2 GPUs, COMMUNITY, registry rp-reg-7, disk 30, CUDA 12.4/12.8, both data centers, ports 8000/tcp and 8888/http", pod)
	}
	if !strings.HasPrefix(pod.Name, "gantry-gantry-"+spec.ID) {
		t.Errorf("pod name %q; want gantry-<installation>-<worker>", pod.Name)
	}
	running := f.rec.Wait(t, spec.ID, pool.WorkerRunning, time.Second)
	if addr := running.Addrs[8000]; !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("WorkerRunning.Addrs = %v; want the public address of port 8000", running.Addrs)
	}
	f.stop(spec.ID)
}

func TestDescribeFromCatalog(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{Pool: core.PoolInfo{GPUs: 16}}, runpodfake.Config{})
	d := f.pool.Describe()
	if d.Adapter != "runpod" || d.DisplayName != "RTX 4090" || d.MemoryGB != 24 || d.PerWorker != 8 || d.DataCenter != "RUNPOD" ||
		d.GPUs != 16 || !slices.Equal(d.CUDAVersions, []string{"11.8", "12.4", "12.8"}) {
		t.Errorf("Describe() = %+v; want the catalog's name, memory, max count and CUDA versions, and all 16 GPUs (HIGH stock)", d)
	}
	small := newPool(t, f.cloud, Config{Pool: core.PoolInfo{GPUs: 2}})
	if d := small.Describe(); d.PerWorker != 2 {
		t.Errorf("Describe() of a pool of 2 GPUs: PerWorker %d; want 2 (RunPod's max count 8, capped by the pool's count)", d.PerWorker)
	}
	c := newCloud(t, runpodfake.Config{Runner: idle{}})
	_, err := New(context.Background(), Config{Pool: core.PoolInfo{ID: "x", GPUType: "NVIDIA B300", GPUs: 1}, API: c.URL, APIKeyEnv: keyEnv, PublicURL: "https://g.example"})
	if err == nil || !strings.Contains(err.Error(), `"NVIDIA B300" is not in RunPod's GPU catalog (it has: NVIDIA GeForce RTX 4090)`) {
		t.Errorf("New(an unknown GPU type) = %v; want an error listing the catalog", err)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	good := Config{Pool: core.PoolInfo{ID: "x", GPUType: gpu4090.ID, GPUs: 1}, API: "http://127.0.0.1:1", APIKeyEnv: keyEnv, PublicURL: "https://g.example"}
	for _, tc := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.APIKeyEnv = "" }, "apiKeyEnv: name the environment variable"},
		{func(c *Config) { c.APIKeyEnv = "GANTRY_RUNPOD_TEST_UNSET" }, "GANTRY_RUNPOD_TEST_UNSET is empty or not set"},
		{func(c *Config) { c.PublicURL = "" }, "publicUrl: required"},
		{func(c *Config) { c.PublicURL = "http://gantry.example.com" }, "must be https"},
		{func(c *Config) { c.PublicURL = "https://g.example/?q=1" }, "want scheme://host"},
		{func(c *Config) { c.Cloud = "PRIVATE" }, `cloud "PRIVATE"`},
		{func(c *Config) { c.MaxPods = -1 }, "must not be negative"},
		{func(c *Config) { c.Pool.CPU = true }, "CPU pools are not supported"},
		{func(c *Config) { c.Stock = map[string]int{"PLENTY": 4} }, "stock PLENTY: 4: want LOW, MEDIUM or HIGH"},
		{func(c *Config) { c.Stock = map[string]int{"LOW": -1} }, "stock LOW: -1"},
	} {
		cfg := good
		tc.change(&cfg)
		if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v; want an error saying %q", cfg, err, tc.want)
		}
	}
}

func TestCapacityErrorIsThrottled(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{}, runpodfake.Config{})
	f.cloud.FailCreates(1)
	spec := f.spec()
	err := f.pool.Start(context.Background(), spec)
	var th *ThrottledError
	if !errors.As(err, &th) || !errors.Is(err, pool.ErrNoCapacity) || !strings.Contains(err.Error(), "no longer any instances available") {
		t.Fatalf("Start with no capacity at RunPod = %v; want a *ThrottledError (ErrNoCapacity) quoting RunPod", err)
	}
	again := f.spec()
	again.GPUs = spec.GPUs // the refused start holds no device
	f.start(again)
	f.stop(again.ID)
	if evs := f.rec.Events(spec.ID); len(evs) != 0 {
		t.Errorf("events of the refused worker: %s; want none", adaptertest.FormatEvents(evs))
	}
	f.cloud.SetAvailability(gpu4090.ID, "NONE")
	if err := f.pool.readCatalog(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := f.pool.Start(context.Background(), f.spec()); !errors.As(err, &th) || !strings.Contains(err.Error(), "no NVIDIA GeForce RTX 4090 in stock") {
		t.Errorf("Start while the catalog shows no stock = %v; want throttled, saying so", err)
	}
}

// TestCapacityFollowsTheStock checks that the pool's capacity is its count lowered by RunPod's
// stock level (as the poll loop reads it) and by the cost guard.
func TestCapacityFollowsTheStock(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{Pool: core.PoolInfo{GPUs: 24}, CatalogEvery: 20 * time.Millisecond}, runpodfake.Config{})
	capacity := func(want int, why string) {
		t.Helper()
		testkit.Eventually(t, fmt.Sprintf("capacity %d: %s", want, why), func() bool {
			return f.pool.Capacity() == want
		})
	}
	// Levels count as: LOW one pod's GPUs (RunPod's max count, 8), MEDIUM half the count,
	// HIGH the count; NONE nothing.
	capacity(24, "HIGH stock: the pool's count")
	for _, tc := range []struct {
		level string
		want  int
	}{{"NONE", 0}, {"LOW", 8}, {"MEDIUM", 12}, {"HIGH", 24}, {"LOW", 8}} {
		f.cloud.SetAvailability(gpu4090.ID, tc.level)
		capacity(tc.want, tc.level+" stock")
	}
	// What the pool holds when the stock is read counts on top of the stock: with none left,
	// its pods keep their GPUs.
	a := f.spec()
	a.GPUs = []int{0, 1} // two GPUs, whatever the indices
	f.start(a)
	f.cloud.SetAvailability(gpu4090.ID, "NONE")
	capacity(2, "NONE stock, 2 GPUs held")
	f.stop(a.ID)
	capacity(0, "NONE stock, none held")

	for _, tc := range []struct {
		cfg  Config
		want int
		why  string
	}{
		{Config{Stock: map[string]int{"LOW": 2}}, 2, "LOW stock counted as 2 GPUs"},
		{Config{MaxPods: 1}, 8, "maxPods 1: one pod of at most 8 GPUs"},
		{Config{MaxSpendPerHour: 2}, 2, "maxSpendPerHour 2 at 0.69 USD/h a GPU"},
		{Config{Pool: core.PoolInfo{GPUs: 4}}, 4, "the count is the ceiling"},
		{Config{DataCenters: []string{"EU-RO-1"}}, 0, "no stock in the pool's data center"},
		{Config{DataCenters: []string{"EU-RO-1", "US-TX-3"}}, 8, "the best of the pool's data centers (LOW)"},
		{Config{Pool: core.PoolInfo{CUDAVersions: []string{"12.9"}}}, 0, "no machine runs the pool's CUDA version"},
	} {
		cloud := newCloud(t, runpodfake.Config{Runner: idle{}, GPUs: []runpodfake.GPU{func() runpodfake.GPU {
			g := gpu4090
			g.DataCenters, g.Availability = []string{"US-TX-3", "EU-RO-1"}, "LOW"
			return g
		}()}})
		cloud.SetDataCenterAvailability(gpu4090.ID, "EU-RO-1", "NONE")
		tc.cfg.Pool.GPUs = cmp.Or(tc.cfg.Pool.GPUs, 24)
		if got := newPool(t, cloud, tc.cfg).Capacity(); got != tc.want {
			t.Errorf("Capacity() with %s = %d; want %d", tc.why, got, tc.want)
		}
	}
}

// TestStartsBeyondTheStockAreThrottled checks that the scheduler's placer reserves against
// the capacity the stock gives, and that a start the stock no longer allows (it fell after
// the placement) is refused as throttled, saying why.
func TestStartsBeyondTheStockAreThrottled(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{Pool: core.PoolInfo{GPUs: 16}, Stock: map[string]int{"LOW": 1}}, runpodfake.Config{})
	placer, err := scheduler.NewPlacer([]pool.Pool{f.pool})
	if err != nil {
		t.Fatal(err)
	}
	want := scheduler.Want{Pools: []string{f.pool.desc.ID}, Count: 8}
	a, err := placer.Place(want)
	if err != nil || a.GPUs != nil {
		t.Fatalf("Place(8 GPUs) on HIGH stock = %+v, %v; want a reservation without device indices", a, err)
	}
	b, err := placer.Place(want)
	if err != nil {
		t.Fatalf("Place(8 more GPUs) = %v; want a reservation (16 in all)", err)
	}
	var full *scheduler.NoRoomError
	if _, err := placer.Place(scheduler.Want{Pools: want.Pools}); !errors.As(err, &full) {
		t.Errorf("Place(1 GPU) with all 16 reserved = %v; want a NoRoomError", err)
	}
	a.Release()
	b.Release()

	r1, err := placer.Place(scheduler.Want{Pools: want.Pools})
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Release()
	one := f.spec()
	one.GPUs, one.GPUCount = nil, 1
	f.start(one)
	f.cloud.SetAvailability(gpu4090.ID, "LOW")
	if err := f.pool.readCatalog(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := placer.Total(f.pool.desc.ID); got != 2 {
		t.Errorf("placer's total on LOW stock counted as 1 GPU, 1 held = %d; want 2", got)
	}
	r, err := placer.Place(scheduler.Want{Pools: want.Pools})
	if err != nil {
		t.Fatalf("Place(1 GPU) on LOW stock = %v; want a reservation", err)
	}
	defer r.Release()
	if _, err := placer.Place(scheduler.Want{Pools: want.Pools}); !errors.As(err, &full) {
		t.Errorf("Place(1 more GPU) beyond LOW stock = %v; want a NoRoomError", err)
	}
	// The placer's capacity is the pool's own: a start past it (the stock fell after the
	// placement, or a caller did not reserve) is throttled with the reason.
	two := f.spec()
	two.GPUs, two.GPUCount = nil, 2
	var th *ThrottledError
	err = f.pool.Start(context.Background(), two)
	if !errors.As(err, &th) || !errors.Is(err, pool.ErrNoCapacity) ||
		!strings.Contains(err.Error(), "RunPod's catalog shows LOW stock of NVIDIA GeForce RTX 4090 in the SECURE cloud") ||
		!strings.Contains(err.Error(), "counted as 1 GPU(s) free besides the 1 the pool held then; it holds 1 and the pod asks 2") {
		t.Errorf("Start(2 GPUs) beyond the stock = %v; want throttled, naming the stock level and the figures", err)
	}
	f.stop(one.ID)

	g := setup(t, Config{Pool: core.PoolInfo{GPUs: 2}}, runpodfake.Config{})
	g.start(g.spec())
	big := g.spec()
	big.GPUs, big.GPUCount = nil, 2
	if err := g.pool.Start(context.Background(), big); !errors.As(err, &th) || !strings.Contains(err.Error(), "rents at most 2 GPU(s) at once (its count); it holds 1 and the pod asks 2") {
		t.Errorf("Start(2 GPUs) on a pool of 2 with 1 held = %v; want throttled by the pool's count", err)
	}
}

func TestCostGuard(t *testing.T) {
	t.Parallel()
	var th *ThrottledError
	f := setup(t, Config{MaxPods: 2}, runpodfake.Config{})
	a, b := f.spec(), f.spec()
	f.start(a)
	f.start(b)
	if err := f.pool.Start(context.Background(), f.spec()); !errors.As(err, &th) || !strings.Contains(err.Error(), "allows 2 pod(s) at once (maxPods)") {
		t.Errorf("a third pod with maxPods 2: %v; want throttled by maxPods", err)
	}
	f.stop(a.ID)
	f.start(f.spec())

	// 0.69 USD/h a GPU: two single-GPU pods fit 1.5 USD/h, a third does not; a suspended pod
	// costs nothing, and resuming it counts again.
	g := setup(t, Config{MaxSpendPerHour: 1.5}, runpodfake.Config{})
	a, b = g.spec(), g.spec()
	g.start(a)
	g.start(b)
	third := g.spec()
	if err := g.pool.Start(context.Background(), third); !errors.As(err, &th) || !strings.Contains(err.Error(), "allows 1.50 USD/h (maxSpendPerHour); its running pods cost 1.38 and one more 0.69") {
		t.Errorf("a third pod over maxSpendPerHour: %v; want throttled, with the figures", err)
	}
	if err := g.pool.Suspend(context.Background(), a.ID); err != nil {
		t.Fatal(err)
	}
	g.rec.Wait(t, a.ID, pool.WorkerSuspended, testkit.WaitTimeout)
	g.start(third)
	if err := g.pool.Resume(context.Background(), a.ID); !errors.As(err, &th) {
		t.Errorf("Resume over maxSpendPerHour = %v; want throttled", err)
	}
}

func TestUnauthorizedAndForbidden(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{}, runpodfake.Config{})
	f.cloud.Forbid(true)
	err := f.pool.Start(context.Background(), f.spec())
	if err == nil || !strings.Contains(err.Error(), "is unhealthy: RunPod refuses the API key in $"+keyEnv) || !strings.Contains(err.Error(), "403") {
		t.Errorf("Start with a key lacking permission = %v; want the pool unhealthy, naming the variable and the 403", err)
	}
	if h := f.pool.Health(); h == nil || !strings.Contains(h.Error(), "403") {
		t.Errorf("Health() = %v; want the 403", h)
	}
	f.cloud.Forbid(false)
	spec := f.spec()
	f.start(spec)
	if h := f.pool.Health(); h != nil {
		t.Errorf("Health() after a call succeeded = %v; want nil", h)
	}

	// A wrong key does not fail New: the pool starts unhealthy and says why.
	c := newCloud(t, runpodfake.Config{Runner: idle{}})
	p, err := New(context.Background(), Config{Pool: core.PoolInfo{ID: "x", GPUType: gpu4090.ID, GPUs: 1, CUDAVersions: []string{"12.4"}},
		API: c.URL, APIKeyEnv: "GANTRY_RUNPOD_TEST_WRONG_KEY", PublicURL: "https://g.example", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("New with a wrong key = %v; want a pool, unhealthy", err)
	}
	defer p.Close()
	if h := p.Health(); h == nil || !strings.Contains(h.Error(), "401") {
		t.Errorf("Health() with a wrong key = %v; want the 401", h)
	}
}

func TestRateLimitedCallsWaitAndRetry(t *testing.T) {
	t.Parallel()
	// The create is the only request before the list after it; the pod is RUNNING at once.
	f := setup(t, Config{Poll: time.Hour}, runpodfake.Config{Provision: time.Nanosecond, Boot: time.Nanosecond})
	f.cloud.Throttle(1, 1) // the next request: 429, Retry-After: 1
	began := time.Now()
	spec := f.spec()
	f.start(spec) // the create, or a list racing it, is refused: every request waits
	if took := time.Since(began); took < time.Second {
		t.Errorf("a start throttled for 1 s took %v; want at least 1 s", took)
	}
	f.stop(spec.ID)
}

func TestPacerHonoursRetryAfterAndRateLimit(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var at []time.Time
	answers := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		},
		func(w http.ResponseWriter) { w.Header().Set("RateLimit", `"minute";r=0;t=1, "hour";r=10;t=100`) },
		func(w http.ResponseWriter) {},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n := len(at)
		at = append(at, time.Now())
		mu.Unlock()
		answers[min(n, len(answers)-1)](w)
	}))
	defer srv.Close()
	c := &http.Client{Transport: &pacer{next: srv.Client().Transport, gate: &gate{}}}
	for range 2 {
		resp, err := c.Post(srv.URL, "text/plain", strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d; want 200 after the retry", resp.StatusCode)
		}
	}
	if len(at) != 3 || at[1].Sub(at[0]) < time.Second || at[2].Sub(at[1]) < time.Second {
		t.Errorf("requests at %v; want 3, a second apart: after Retry-After: 1, and after a RateLimit window at r=0 resetting in 1 s", at)
	}
}

func TestResetAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		h    string
		want time.Duration
		ok   bool
	}{
		{`"minute";r=0;t=12, "hour";r=2800;t=1812, "day";r=49500;t=45012`, 12 * time.Second, true},
		{`"minute";r=3;t=12, "hour";r=0;t=1812`, 1812 * time.Second, true},
		{`"minute";r=5;t=12`, 0, false},
		{``, 0, false},
		{`garbage;;r=;t`, 0, false},
	} {
		if got, ok := resetAfter(tc.h); got != tc.want || ok != tc.ok {
			t.Errorf("resetAfter(%q) = %v, %v; want %v, %v", tc.h, got, ok, tc.want, tc.ok)
		}
	}
}

// act applies an action to a pod behind the pool's back.
func (c *cloud) act(t *testing.T, pod string, a rpapi.PodAction) {
	t.Helper()
	res, err := c.client(t).PodAction(context.Background(), &rpapi.PodActionRequest{Action: a}, rpapi.PodActionParams{ID: pod})
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := res.(*rpapi.ProblemStatusCodeWithHeaders); ok {
		t.Fatalf("%s %s: %d %s", a, pod, p.StatusCode, p.Response.Detail)
	}
}

func TestConflictIsReconciled(t *testing.T) {
	t.Parallel()
	// No list comes between but the one after each change; pods are RUNNING at once.
	f := setup(t, Config{Poll: time.Hour}, runpodfake.Config{Provision: time.Nanosecond, Boot: time.Nanosecond})
	spec := f.spec()
	if err := f.pool.Start(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	f.rec.Wait(t, spec.ID, pool.WorkerRunning, testkit.WaitTimeout) // the list after the create
	pod, _ := f.cloud.podOf(spec.ID)
	f.cloud.act(t, pod.ID, rpapi.PodActionStop) // stopped behind the pool's back: Suspend's stop answers 409
	if err := f.pool.Suspend(context.Background(), spec.ID); err != nil {
		t.Fatalf("Suspend of a pod already EXITED = %v; want nil (the 409 reconciled)", err)
	}
	f.rec.Wait(t, spec.ID, pool.WorkerSuspended, testkit.WaitTimeout)
	if n := f.cloud.Requests("GET /v2/pods/{id}"); n != 1 {
		t.Errorf("%d getPod requests; want 1, reading the pod again after the 409", n)
	}
	f.cloud.act(t, pod.ID, rpapi.PodActionStart) // started behind its back: Resume's start answers 409
	if err := f.pool.Resume(context.Background(), spec.ID); err != nil {
		t.Fatalf("Resume of a pod already starting = %v; want nil", err)
	}
	f.pool.kickWatch()
	f.rec.Wait(t, spec.ID, pool.WorkerResumed, testkit.WaitTimeout)
	f.stop(spec.ID)
}

func TestPodsEndingByThemselves(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{}, runpodfake.Config{})
	spec := f.spec()
	f.start(spec)
	pod, _ := f.cloud.podOf(spec.ID)
	f.cloud.act(t, pod.ID, rpapi.PodActionStop)
	e := f.rec.Wait(t, spec.ID, pool.WorkerExited, testkit.WaitTimeout)
	if e.Stopped || e.Err == nil || !strings.Contains(e.Err.Error(), "is EXITED") {
		t.Errorf("a pod stopped outside Gantry: exit %+v; want an error saying it is EXITED", e)
	}
	testkit.Eventually(t, "the exited pod terminated", func() bool { _, ok := f.cloud.Pod(pod.ID); return !ok })

	f.cloud.FailStart(testImage, "exec /worker: exec format error")
	bad := f.spec()
	if err := f.pool.Start(context.Background(), bad); err != nil {
		t.Fatal(err)
	}
	e = f.rec.Wait(t, bad.ID, pool.WorkerExited, testkit.WaitTimeout)
	if e.Stopped || e.Err == nil || !strings.Contains(e.Err.Error(), "is ERROR") || !strings.Contains(e.Err.Error(), "exec format error") {
		t.Errorf("a pod failing to start: exit %+v; want an error saying ERROR and quoting its log", e)
	}
	f.rec.Wait(t, bad.ID, pool.WorkerRunning, 0) // reported first, as every worker's first event
}

func TestLeftoversOfAnEarlierRunAreListedAndStopped(t *testing.T) {
	t.Parallel()
	c := newCloud(t, runpodfake.Config{Runner: idle{}})
	rec := &adaptertest.Recorder{}
	cfg := Config{Pool: core.PoolInfo{ID: "burst"}, API: c.URL, APIKeyEnv: keyEnv, PublicURL: "https://g.example", Poll: 25 * time.Millisecond,
		Log: slog.New(slog.DiscardHandler)}
	cfg.Pool.GPUType, cfg.Pool.GPUs = gpu4090.ID, 4
	first, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"old-1", "old-2"} {
		if err := first.Start(context.Background(), pool.WorkerSpec{ID: id, Endpoint: "ep1", Image: testImage, Report: rec.Report}); err != nil {
			t.Fatal(err)
		}
	}
	first.Close() // a crash: its pods stay
	other := cfg
	other.Installation = "staging"
	stranger, err := New(context.Background(), other)
	if err != nil {
		t.Fatal(err)
	}
	if err := stranger.Start(context.Background(), pool.WorkerSpec{ID: "theirs", Image: testImage, Report: rec.Report}); err != nil {
		t.Fatal(err)
	}
	second, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	ws, err := second.LiveWorkers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(ws, func(a, b pool.LiveWorker) int { return strings.Compare(a.ID, b.ID) })
	if len(ws) != 2 || ws[0].ID != "old-1" || ws[1].ID != "old-2" || ws[0].Known || ws[0].Endpoint != "ep1" || ws[0].Started.IsZero() {
		t.Fatalf("Workers() after a restart = %+v; want old-1 and old-2 of ep1, not known (the other installation's pod is not listed)", ws)
	}
	for _, w := range ws { // as the scheduler reaps them
		if err := second.Stop(context.Background(), w.ID); err != nil {
			t.Errorf("Stop(%s) of a worker left by an earlier run = %v", w.ID, err)
		}
	}
	if pods := c.Pods(); len(pods) != 1 || pods[0].Env[EnvWorker] != "theirs" {
		t.Errorf("pods after the leftovers were stopped: %+v; want only the other installation's", pods)
	}
	if ws, _ := stranger.LiveWorkers(context.Background()); len(ws) != 1 || !ws[0].Known {
		t.Errorf("Workers() of the pool that started it = %+v; want it, known", ws)
	}
	if err := stranger.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	stranger.Close()
	if n := len(c.Pods()); n != 0 {
		t.Errorf("%d pods after Shutdown; want none", n)
	}
}

// FuzzResetAfter: any RateLimit header reads without a panic, and a wait is never negative.
func FuzzResetAfter(f *testing.F) {
	f.Add(`"minute";r=0;t=12, "hour";r=2800;t=1812`)
	f.Add(`;;r=0;t=-5,`)
	f.Fuzz(func(t *testing.T, h string) {
		if d, _ := resetAfter(h); d < 0 {
			t.Fatalf("resetAfter(%q) = %v", h, d)
		}
	})
}

func TestLogs(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{}, runpodfake.Config{})
	spec := f.spec()
	f.start(spec)
	rc, err := f.pool.Logs(context.Background(), spec.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if want := "[system] pod assigned to a machine in US-TX-3; pulling gantry-test/worker\n[system] container started\n"; string(b) != want {
		t.Errorf("Logs(tail 2) = %q; want %q", b, want)
	}
	f.stop(spec.ID)
	if _, err := f.pool.Logs(context.Background(), spec.ID, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Logs of an exited worker = %v; want fs.ErrNotExist (RunPod deletes a pod's log with it)", err)
	}
}

// cutOff answers the first create with a pod created but the connection cut: the client sees
// an error, RunPod has the pod.
type cutOff struct {
	http.Handler
	once sync.Once
}

func (c *cutOff) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == "POST" && r.URL.Path == "/v2/pods" {
		cut := false
		c.once.Do(func() { cut = true })
		if cut {
			c.Handler.ServeHTTP(httptest.NewRecorder(), r)
			panic(http.ErrAbortHandler)
		}
	}
	c.Handler.ServeHTTP(w, r)
}

func TestACreateCutOffLeavesNoPod(t *testing.T) {
	t.Parallel()
	fake := runpodfake.New(runpodfake.Config{Key: testKey, GPUs: []runpodfake.GPU{gpu4090}, Runner: idle{}})
	srv := httptest.NewServer(&cutOff{Handler: fake})
	defer srv.Close()
	p, err := New(context.Background(), Config{Pool: core.PoolInfo{ID: "cut", GPUType: gpu4090.ID, GPUs: 1}, API: srv.URL, APIKeyEnv: keyEnv,
		PublicURL: "https://g.example", Poll: 25 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rec := &adaptertest.Recorder{}
	if err := p.Start(context.Background(), pool.WorkerSpec{ID: "w1", Image: testImage, Report: rec.Report}); err == nil {
		t.Fatal("Start with the create cut off = nil; want an error")
	}
	// RunPod made the pod; the pool terminates it, unasked.
	testkit.Eventually(t, "the pod left by the cut-off create terminated", func() bool {
		return fake.Requests("DELETE /v2/pods/{id}") == 1 && len(fake.Pods()) == 0
	})
	if evs := rec.Events("w1"); len(evs) != 0 {
		t.Errorf("events of the refused worker: %s; want none", adaptertest.FormatEvents(evs))
	}
}

// An endpoint's allowedCudaVersions reach its pods, within the pool's own versions when the
// pool's config names some (issue 29, item 18).
func TestPodsRunTheEndpointsCUDAVersions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		pool, endpoint []string
		want           []string // allowedCudaVersions sent
		err            string   // or the start's error
	}{
		{"endpoint only", nil, []string{"12.8", "12.4"}, []string{"12.4", "12.8"}, ""},
		{"both", []string{"12.4", "12.8"}, []string{"12.8", "11.8"}, []string{"12.8"}, ""},
		{"pool only", []string{"12.4"}, nil, []string{"12.4"}, ""},
		{"neither", nil, nil, nil, ""},
		{"none in common", []string{"12.4"}, []string{"11.8"}, nil, "the endpoint allows CUDA 11.8, and the pool's pods run 12.4: none in common"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, Config{Pool: core.PoolInfo{CUDAVersions: tc.pool}}, runpodfake.Config{})
			spec := f.spec()
			spec.CUDAVersions = tc.endpoint
			if tc.err != "" {
				if err := f.pool.Start(context.Background(), spec); err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("Start = %v; want an error containing %q", err, tc.err)
				}
				if _, ok := f.cloud.podOf(spec.ID); ok {
					t.Error("a pod was created; want none")
				}
				return
			}
			f.start(spec)
			pod, ok := f.cloud.podOf(spec.ID)
			if !ok {
				t.Fatal("no pod for the worker")
			}
			if !slices.Equal(pod.CUDA, tc.want) {
				t.Errorf("the pod's allowedCudaVersions = %v; want %v", pod.CUDA, tc.want)
			}
			f.stop(spec.ID)
		})
	}
}
