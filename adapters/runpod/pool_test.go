package runpod

import (
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/adapters/adaptertest"
	"github.com/gantryhq/gantry/adapters/runpod/runpodfake"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testworker"
	"github.com/gantryhq/gantry/pool"
)

// kitClouds holds the fake each kit subtest's pool rents from, for the harness's Probe.
var kitClouds sync.Map // *testing.T -> *cloud

// TestPoolContract runs the adapter kit against the fake RunPod, each pod's container a
// process: FLASHBOOT is the stop and start actions, a crash is a pod that went EXITED (its
// log names the status), and an unstartable spec names a registry credential the pool has no
// RunPod id for.
func TestPoolContract(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, adaptertest.Harness{
		New: func(t *testing.T) pool.Pool {
			c := newCloud(t, runpodfake.Config{})
			kitClouds.Store(t, c)
			t.Cleanup(func() { kitClouds.Delete(t) })
			return newPool(t, c, Config{Pool: core.PoolInfo{GPUs: 8}}) // room for the Workers started at once
		},
		Spec: func(t *testing.T, b adaptertest.Behaviour) pool.WorkerSpec {
			spec := pool.WorkerSpec{Image: testImage, Endpoint: "ep", Env: map[string]string{"KIT": "1"}, Args: testworker.Args(b)}
			if b == adaptertest.Unstartable {
				spec.Registry = "no-such-credential"
			}
			return spec
		},
		Probe: func(t *testing.T, spec pool.WorkerSpec) (map[string]string, bool) {
			c, _ := kitClouds.Load(t)
			return probeEnv(c.(*cloud), spec.ID)
		},
		StopGrace: testGrace,
		Timeout:   30 * time.Second,
		Workers:   8,
	})
}
