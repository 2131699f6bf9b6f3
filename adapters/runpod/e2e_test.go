package runpod_test

import (
	"cmp"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/adapters/runpod"
	"github.com/gantryhq/gantry/adapters/runpod/runpodfake"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
)

// TestJobsFlowThroughTheFakeCloud runs a whole Gantry with a runpod pool on the fake RunPod,
// each pod's container Gantry's echo worker run as a local process with the pod's
// environment: a job sent to an endpoint scaled to zero makes the pool rent a pod, whose
// worker reaches Gantry at the pool's public URL with its token, takes the job and posts the
// output; when Gantry stops, the pod is terminated.
func TestJobsFlowThroughTheFakeCloud(t *testing.T) {
	t.Parallel()
	g := newGantry(t, runpod.Config{Pool: core.PoolInfo{ID: "burst", GPUType: "NVIDIA L40S", GPUs: 2}, MaxPods: 1})
	fake, s, key, ln := g.fake, g.server, g.key, g.ln

	var ep struct{ ID string }
	post(t, s.URL()+"/v2/serverless", key, `{"name":"echo","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["burst"]},`+
		`"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"max":1}}`, http.StatusCreated, &ep)
	var job struct {
		Status string
		Output map[string]any
	}
	post(t, s.URL()+"/v2/"+ep.ID+"/runsync", key, `{"input":{"prompt":"to the cloud and back"}}`, http.StatusOK, &job)
	if job.Status != "COMPLETED" || job.Output["prompt"] != "to the cloud and back" {
		t.Fatalf("runsync = %+v; want COMPLETED with the input echoed", job)
	}
	pods := fake.Pods()
	if len(pods) != 1 || pods[0].Image != runpod.TestEchoImage || pods[0].Status != runpodfake.Running || pods[0].GPU != "NVIDIA L40S" {
		t.Fatalf("pods: %+v; want one RUNNING pod of gantry/echo on an L40S", pods)
	}
	env := pods[0].Env
	if !strings.HasPrefix(env["RUNPOD_WEBHOOK_GET_JOB"], "http://"+ln.Addr().String()+"/v2/"+ep.ID+"/job-take/") || !strings.HasPrefix(env["RUNPOD_AI_API_KEY"], core.WorkerTokenPrefix) {
		t.Errorf("pod env: %v; want the job-take URL at the public URL and a worker token", env)
	}
	// The cost guard allows one pod, which the first endpoint's idle worker holds: a second
	// endpoint's job waits, throttled, with the guard's reason on its /health.
	var other struct{ ID string }
	post(t, s.URL()+"/v2/serverless", key, `{"name":"echo2","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["burst"]},`+
		`"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"max":1}}`, http.StatusCreated, &other)
	// The pod's token is its worker's alone: refused on another endpoint's routes and on
	// another worker's (core's worker-token tests check that it expires; every pool's workers
	// get the same tokens).
	tok, worker := env["RUNPOD_AI_API_KEY"], env[runpod.EnvWorker]
	for _, c := range []struct {
		path string
		want int
	}{
		{"/v2/" + ep.ID + "/ping/" + worker, http.StatusOK},
		{"/v2/" + other.ID + "/ping/" + worker, http.StatusForbidden},
		{"/v2/" + ep.ID + "/ping/" + ep.ID + "-another", http.StatusForbidden},
	} {
		if got := status(t, s.URL()+c.path+"?gpu=L40S", tok); got != c.want {
			t.Errorf("GET %s with the pod's worker token = %d; want %d", c.path, got, c.want)
		}
	}
	var queued struct{ ID, Status string }
	post(t, s.URL()+"/v2/"+other.ID+"/run", key, `{"input":{"n":2}}`, http.StatusOK, &queued)
	var health struct {
		Workers struct{ Throttled, Unhealthy int }
		Reason  string
	}
	testkit.Eventually(t, "the second endpoint throttled by the cost guard", func() bool {
		get(t, s.URL()+"/v2/"+other.ID+"/health", key, &health)
		return health.Workers.Throttled == 1
	})
	if health.Workers.Unhealthy != 0 || !strings.Contains(health.Reason, "waiting for capacity: pool burst: ") ||
		!strings.Contains(health.Reason, "cost guard allows 1 pod(s) at once (maxPods)") {
		t.Errorf("/health of the second endpoint = %+v; want throttled by maxPods, none unhealthy", health)
	}
	if n := len(fake.Pods()); n != 1 {
		t.Errorf("%d pods; want 1, the cost guard's cap", n)
	}

	// Gantry's catalog shows what the adapter read from RunPod's.
	b := get(t, s.URL()+"/v2/catalog/gpus", key, nil)
	if want := `{"id":"NVIDIA L40S","displayName":"L40S","memoryInGb":48,"pool":"burst","count":2,"dataCenterId":"RUNPOD"}`; !strings.Contains(string(b), want) {
		t.Errorf("GET /v2/catalog/gpus = %s; want %s", b, want)
	}
}

// TestCatalogSaysWhyAPoolIsUnhealthy checks that Gantry's GPU catalog names the reason while
// RunPod refuses the pool's key (403: a key without the permission), and drops it once
// RunPod accepts the key again, the entry then as it was.
func TestCatalogSaysWhyAPoolIsUnhealthy(t *testing.T) {
	t.Parallel()
	g := newGantry(t, runpod.Config{Pool: core.PoolInfo{ID: "burst", GPUType: "NVIDIA L40S", GPUs: 2}, CatalogEvery: 100 * time.Millisecond})
	url := g.server.URL() + "/v2/catalog/gpus?include=AVAILABILITY"
	healthy := string(get(t, url, g.key, nil))
	if strings.Contains(healthy, "unhealthy") {
		t.Fatalf("GET /v2/catalog/gpus of a healthy pool = %s; want no unhealthy field", healthy)
	}
	g.fake.Forbid(true)
	var gpus []struct{ Pool, Unhealthy string }
	testkit.Eventually(t, "the catalog saying the pool is unhealthy", func() bool {
		get(t, url, g.key, &gpus)
		return len(gpus) == 1 && gpus[0].Unhealthy != ""
	})
	if why := gpus[0].Unhealthy; !strings.Contains(why, "RunPod refuses the API key in $"+runpod.TestKeyEnv) || !strings.Contains(why, "403") {
		t.Errorf("catalog entry's unhealthy = %q; want it to name the key's variable and the 403", why)
	}
	g.fake.Forbid(false)
	testkit.Eventually(t, "the catalog entry as it was once RunPod accepts the key", func() bool {
		return string(get(t, url, g.key, nil)) == healthy
	})
}

// TestStockOutThrottlesTheEndpoint checks capacity from RunPod's catalog through a whole
// Gantry: while the catalog shows no stock, the pool's catalog count is 0 and a job waits,
// throttled, with no pod rented; once stock is back, the job runs.
func TestStockOutThrottlesTheEndpoint(t *testing.T) {
	t.Parallel()
	g := newGantry(t, runpod.Config{Pool: core.PoolInfo{ID: "burst", GPUType: "NVIDIA L40S", GPUs: 2}, CatalogEvery: 50 * time.Millisecond})
	s, key := g.server, g.key
	g.fake.SetAvailability("NVIDIA L40S", "NONE")
	var gpus []struct{ Count int }
	testkit.Eventually(t, "the catalog counting no GPU", func() bool {
		get(t, s.URL()+"/v2/catalog/gpus", key, &gpus)
		return len(gpus) == 1 && gpus[0].Count == 0
	})
	var ep struct{ ID string }
	post(t, s.URL()+"/v2/serverless", key, `{"name":"echo","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["burst"]},`+
		`"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"max":1}}`, http.StatusCreated, &ep)
	var job struct{ ID, Status string }
	post(t, s.URL()+"/v2/"+ep.ID+"/run", key, `{"input":{"n":1}}`, http.StatusOK, &job)
	var health struct {
		Workers struct{ Throttled int }
		Reason  string
	}
	testkit.Eventually(t, "the endpoint throttled for want of stock", func() bool {
		get(t, s.URL()+"/v2/"+ep.ID+"/health", key, &health)
		return health.Workers.Throttled == 1
	})
	if !strings.Contains(health.Reason, "waiting for capacity: no pool has room: burst: 0 of 0 in use") {
		t.Errorf("/health reason = %q; want waiting for capacity, the pool at 0", health.Reason)
	}
	if pods := g.fake.Pods(); len(pods) != 0 {
		t.Errorf("pods rented with no stock: %+v", pods)
	}
	g.fake.SetAvailability("NVIDIA L40S", "LOW")
	testkit.Eventually(t, "the job completed once stock is back", func() bool {
		get(t, s.URL()+"/v2/"+ep.ID+"/status/"+job.ID, key, &job)
		return job.Status == "COMPLETED"
	})
	get(t, s.URL()+"/v2/catalog/gpus", key, &gpus)
	if gpus[0].Count != 2 {
		t.Errorf("catalog count on LOW stock = %d; want 2 (one pod's GPUs: 8, capped by the pool's count)", gpus[0].Count)
	}
}

// gantry is a whole Gantry whose one pool rents from a fake RunPod, each pod's container
// Gantry's echo worker run as a local process with the pod's environment.
type gantry struct {
	fake   *runpodfake.Fake
	pool   *runpod.Pool
	server *server.Server
	key    string       // an API key of every scope
	ln     net.Listener // the server's: the pool's public URL
}

// newGantry starts a Gantry with a runpod pool of cfg (its API, key, public URL and log filled
// in) on a fake RunPod offering L40S GPUs. When the test ends, Gantry stops, and no pod may be
// left.
func newGantry(t *testing.T, cfg runpod.Config) *gantry {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fake := runpodfake.New(runpodfake.Config{Key: runpod.TestKey, Provision: 50 * time.Millisecond, Boot: 50 * time.Millisecond,
		StopGrace: 5 * time.Second,
		GPUs:      []runpodfake.GPU{{ID: "NVIDIA L40S", Name: "L40S", MemoryGB: 48, Price: 0.86, MaxCount: 8, CUDA: []string{"12.4", "12.8"}}},
		Runner: runpodfake.ProcessRunner{
			Images: map[string][]string{runpod.TestEchoImage: {self, "-test.run=^$", "echo"}},
			Env:    []string{runpod.WorkerModeEnv + "=run"},
		}})
	cloud := httptest.NewServer(fake)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.API, cfg.APIKeyEnv, cfg.PublicURL = cloud.URL, runpod.TestKeyEnv, "http://"+ln.Addr().String()
	cfg.Poll = cmp.Or(cfg.Poll, 50*time.Millisecond)
	cfg.Log = slog.New(slog.DiscardHandler)
	pl, err := runpod.New(context.Background(), cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the server's shutdown, which stops its workers
		ctx, cancel := context.WithTimeout(context.Background(), testkit.WaitTimeout)
		defer cancel()
		if err := pl.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		pl.Close()
		if pods := fake.Pods(); len(pods) != 0 {
			t.Errorf("pods left after Gantry stopped: %+v", pods)
		}
		cloud.Close()
		fake.Close()
	})
	s := servertest.New(t, server.Config{}, server.Options{Pools: []pool.Pool{pl}, Listener: ln})
	return &gantry{fake: fake, pool: pl, server: s, key: servertest.Key(t, s, "alice", core.ScopeAll), ln: ln}
}

// get answers a GET's body, decoded into into when it is not nil; it fails the test unless
// the answer is 200.
func get(t *testing.T, url, key string, into any) []byte {
	t.Helper()
	return []byte(servertest.Expect(t, "GET", url, key, "", http.StatusOK, into))
}

// status answers the status of a GET with a bearer token.
func status(t *testing.T, url, token string) int {
	t.Helper()
	code, _ := servertest.Call(t, "GET", url, token, "")
	return code
}

func post(t *testing.T, url, key, body string, want int, into any) {
	t.Helper()
	servertest.Expect(t, "POST", url, key, body, want, into)
}
