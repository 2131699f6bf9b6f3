package scheduler

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// fakeRoster is ReplicaURLs that a test changes.
type fakeRoster struct {
	mu   sync.Mutex
	urls []string
	ver  uint64
}

func (f *fakeRoster) URLs() ([]string, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.urls, f.ver
}

func (f *fakeRoster) set(urls ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.urls = urls
	f.ver++
}

// bases counts the running workers by the replica their take URL names.
func (r *rig) bases() map[string]int {
	r.pool.mu.Lock()
	defer r.pool.mu.Unlock()
	out := map[string]int{}
	for _, spec := range r.pool.alive {
		u := spec.Env["RUNPOD_WEBHOOK_GET_JOB"]
		base, _, _ := strings.Cut(u, "/v2/")
		for _, k := range []string{"RUNPOD_WEBHOOK_POST_OUTPUT", "RUNPOD_WEBHOOK_POST_STREAM", "RUNPOD_WEBHOOK_PING"} {
			if !strings.HasPrefix(spec.Env[k], base+"/v2/") {
				r.t.Errorf("worker %s: %s = %q; want it at %s like its take", spec.ID, k, spec.Env[k], base)
			}
		}
		out[base]++
	}
	return out
}

// TestWorkersSpreadOverReplicas: with replicas, each queue worker started reaches the one
// with the fewest workers; when a replica leaves the roster its workers are stopped and their
// replacements go to the replicas still there, the one that joined first.
func TestWorkersSpreadOverReplicas(t *testing.T) {
	t.Parallel()
	roster := &fakeRoster{}
	roster.set("http://a:1", "http://b:1")
	r := setupWith(t, func(c *Config) { c.Replicas = roster })
	r.endpoint(func(e *core.Endpoint) { e.Workers = core.Workers{Min: 4, Max: 4, IdleTimeout: 5} })
	for range 10 {
		r.tick(time.Second)
	}
	if got, want := r.bases(), map[string]int{"http://a:1": 2, "http://b:1": 2}; !maps.Equal(got, want) {
		t.Fatalf("workers by replica = %v; want %v", got, want)
	}
	roster.set("http://a:1", "http://c:1") // b left, c joined
	for range 10 {
		r.tick(time.Second)
	}
	if got, want := r.bases(), map[string]int{"http://a:1": 2, "http://c:1": 2}; !maps.Equal(got, want) {
		t.Errorf("workers by replica after b left and c joined = %v; want %v (b's replaced on c)", got, want)
	}
	if _, _, started := r.pool.counts(); started != 6 {
		t.Errorf("%d workers started; want 6 (4, then 2 for b's)", started)
	}
	// Alone again: the rest go to the one left, and a's stay.
	roster.set("http://a:1")
	for range 10 {
		r.tick(time.Second)
	}
	if got, want := r.bases(), map[string]int{"http://a:1": 4}; !maps.Equal(got, want) {
		t.Errorf("workers by replica after c left = %v; want %v", got, want)
	}
	if n := len(r.s.bases.n); n != 1 || r.s.bases.n["http://a:1"] != 4 {
		t.Errorf("counted workers by replica = %v; want only a's 4 (gone ones forgotten)", r.s.bases.n)
	}
}

// TestWorkersWithoutReplicasReachBaseURL: alone (no roster), every worker reaches BaseURL.
func TestWorkersWithoutReplicasReachBaseURL(t *testing.T) {
	t.Parallel()
	r := setup(t)
	r.endpoint(func(e *core.Endpoint) { e.Workers = core.Workers{Min: 2, Max: 2, IdleTimeout: 5} })
	for range 5 {
		r.tick(time.Second)
	}
	if got := r.bases(); !maps.Equal(got, map[string]int{"http://127.0.0.1:1": 2}) {
		t.Errorf("workers by base = %v; want both at BaseURL", got)
	}
	if keys := slices.Collect(maps.Keys(r.s.bases.n)); len(keys) != 0 {
		t.Errorf("counted bases %v without replicas; want none", keys)
	}
}

// ownURLPool is a fakePool whose workers reach Gantry at a URL of its own.
type ownURLPool struct{ *fakePool }

func (ownURLPool) OwnsWorkerURL() bool { return true }

// TestWorkersOfAPoolWithItsOwnURLStay: a pool whose workers reach Gantry at a URL of its own
// (a Kubernetes Service, a cloud pool's publicUrl) gets BaseURL as ever, and its workers are
// not stopped when a replica leaves the roster: they never reached that replica.
func TestWorkersOfAPoolWithItsOwnURLStay(t *testing.T) {
	t.Parallel()
	fp := &fakePool{info: core.PoolInfo{ID: "P", GPUType: "CPU", GPUs: 16, CPU: true}}
	roster := &fakeRoster{}
	roster.set("http://a:1", "http://b:1")
	r := setupWith(t, func(c *Config) { c.Pools, c.Replicas = []pool.Pool{ownURLPool{fp}}, roster }, fp)
	r.endpoint(func(e *core.Endpoint) { e.Workers = core.Workers{Min: 2, Max: 2, IdleTimeout: 5} })
	for range 5 {
		r.tick(time.Second)
	}
	if got := r.bases(); !maps.Equal(got, map[string]int{"http://127.0.0.1:1": 2}) {
		t.Fatalf("workers by base = %v; want both at BaseURL (the pool rebases them)", got)
	}
	roster.set("http://a:1")
	for range 5 {
		r.tick(time.Second)
	}
	if _, _, started := r.pool.counts(); started != 2 {
		t.Errorf("%d workers started; want 2: none stopped when b left", started)
	}
}
