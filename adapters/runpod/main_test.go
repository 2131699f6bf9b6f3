package runpod

import (
	"cmp"
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/adapters/runpod/runpodfake"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/internal/testworker"
)

// The test binary is also the pods' containers: the fake's ProcessRunner runs it again with
// envWorkerMode set, and it then behaves as the mode says instead of running the tests.
const (
	envWorkerMode = "GANTRY_RUNPOD_TEST_WORKER"
	testImage     = "gantry-test/worker"
	echoImage     = "gantry/echo"
	keyEnv        = "GANTRY_RUNPOD_TEST_KEY" // the variable the test pools read their key from
	testKey       = "rp_test_3c4f"
)

// TestMain runs a test worker when the fake started this binary as a pod's container, else
// the tests, failing the run when a goroutine outlives them.
func TestMain(m *testing.M) {
	if os.Getenv(envWorkerMode) != "" {
		os.Exit(testworker.Run(os.Args[len(os.Args)-1]))
	}
	os.Setenv(keyEnv, testKey)
	os.Setenv("GANTRY_RUNPOD_TEST_WRONG_KEY", "wrong")
	testkit.VerifyNoLeaks(m)
}

var gpu4090 = runpodfake.GPU{ID: "NVIDIA GeForce RTX 4090", Name: "RTX 4090", MemoryGB: 24, Price: 0.69, MaxCount: 8,
	CUDA: []string{"12.8", "12.4", "11.8"}}

// cloud is a fake RunPod on a loopback port, running pods as processes of this binary.
type cloud struct {
	*runpodfake.Fake
	URL string
}

// testGrace is the fake's stop grace: how long a container has after SIGTERM.
const testGrace = 300 * time.Millisecond

// newCloud serves a fake RunPod for the test on the real clock, pods taking 20 ms to
// provision and 20 ms to boot.
func newCloud(t *testing.T, cfg runpodfake.Config) *cloud {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Key = testKey
	if cfg.GPUs == nil {
		cfg.GPUs = []runpodfake.GPU{gpu4090}
	}
	if cfg.Provision == 0 && cfg.Boot == 0 {
		cfg.Provision, cfg.Boot = 20*time.Millisecond, 20*time.Millisecond
	}
	cfg.StopGrace = testGrace
	if cfg.Runner == nil {
		cfg.Runner = runpodfake.ProcessRunner{
			Images: map[string][]string{testImage: {self, "-test.run=^$"}, echoImage: {self, "-test.run=^$", testworker.Echo}},
			Env:    []string{envWorkerMode + "=run"},
		}
	}
	f := runpodfake.New(cfg)
	srv := httptest.NewServer(f)
	t.Cleanup(func() {
		srv.Close()
		f.Close()
	})
	return &cloud{Fake: f, URL: srv.URL}
}

// podOf returns the fake pod of a worker.
func (c *cloud) podOf(worker string) (runpodfake.Pod, bool) {
	for _, p := range c.Pods() {
		if p.Env[EnvWorker] == worker {
			return p, true
		}
	}
	return runpodfake.Pod{}, false
}

// newPool returns a pool of cfg on the cloud; it is closed when the test ends, and the test
// fails if it left a pod.
func newPool(t *testing.T, c *cloud, cfg Config) *Pool {
	t.Helper()
	if cfg.Pool.ID == "" {
		cfg.Pool.ID = "rp-" + strings.ToLower(core.NewID(6))
	}
	cfg.Pool.GPUType = cmp.Or(cfg.Pool.GPUType, gpu4090.ID)
	if cfg.Pool.GPUs == 0 {
		cfg.Pool.GPUs = 4
	}
	cfg.API = c.URL
	cfg.APIKeyEnv = keyEnv
	cfg.PublicURL = cmp.Or(cfg.PublicURL, "http://127.0.0.1:1")
	if cfg.Poll == 0 {
		cfg.Poll = 25 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	p, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	t.Cleanup(func() {
		p.Close()
		for _, pod := range c.Pods() {
			if pod.Env[EnvPool] == cfg.Pool.ID {
				t.Errorf("pod %s (%s, worker %s) of pool %s is left after the test", pod.ID, pod.Status, pod.Env[EnvWorker], cfg.Pool.ID)
			}
		}
	})
	return p
}

// probeEnv reads the environment a test worker printed to its pod's log, once it has.
func probeEnv(c *cloud, id string) (map[string]string, bool) {
	pod, ok := c.podOf(id)
	if !ok || pod.Status != runpodfake.Running {
		return nil, false
	}
	return testworker.Env(pod.Log)
}
