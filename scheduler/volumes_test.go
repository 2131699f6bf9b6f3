package scheduler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/store/memq"
	"github.com/gantryhq/gantry/store/pebble"
)

// storingPool is a fake pool that stores network volumes: it records each EnsureVolume,
// and fails them with fail.
type storingPool struct {
	*fakePool
	vmu     sync.Mutex
	ensured []core.Volume
	fail    error
}

func (p *storingPool) EnsureVolume(_ context.Context, v core.Volume) error {
	p.vmu.Lock()
	defer p.vmu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	p.ensured = append(p.ensured, v)
	return nil
}
func (p *storingPool) DeleteVolume(context.Context, core.Volume) error         { return nil }
func (p *storingPool) VolumeUsage(context.Context, core.Volume) (int64, error) { return -1, nil }

// volumeRig is setup's rig over pools, whose scheduler knows the volumes vols.
func volumeRig(t *testing.T, first *fakePool, pools []pool.Pool, vols map[string]core.Volume, override map[string]string) *rig {
	t.Helper()
	st, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := &rig{t: t, clock: testkit.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), pool: first}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	js, err := st.Jobs(memq.Options{Clock: r.clock})
	if err != nil {
		t.Fatal(err)
	}
	r.jobs = core.NewJobs(core.JobsConfig{Store: js, Clock: r.clock, Log: log})
	r.s, err = New(Config{Jobs: r.jobs, Pools: pools, BaseURL: "http://127.0.0.1:1", Clock: r.clock, Log: log,
		InitTimeout: time.Minute, BackoffMin: time.Second, BackoffMax: 8 * time.Second,
		VolumeDC: func(id string) (string, bool) { v, ok := vols[id]; return v.DataCenter, ok },
		Volume: func(_ context.Context, id string) (core.Volume, error) {
			if v, ok := vols[id]; ok {
				return v, nil
			}
			return core.Volume{}, core.ErrNotFound
		},
		VolumeStorage: override})
	if err != nil {
		t.Fatal(err)
	}
	r.s.tickWaits = true
	t.Cleanup(r.s.Close)
	return r
}

// TestWorkerGetsItsVolume: a worker of an endpoint naming volumes starts with the one in its
// pool's data center, made ready by the pool storing that data center's volumes first.
func TestWorkerGetsItsVolume(t *testing.T) {
	t.Parallel()
	run := &storingPool{fakePool: &fakePool{info: core.PoolInfo{ID: "P", GPUs: 4, DataCenter: "EU", Adapter: "fake"}}}
	vols := map[string]core.Volume{
		"vus": {ID: "vus", Owner: "alice", SizeGB: 10, DataCenter: "US"},
		"veu": {ID: "veu", Owner: "alice", SizeGB: 50, DataCenter: "EU"},
	}
	r := volumeRig(t, run.fakePool, []pool.Pool{run}, vols, nil)
	ep := r.endpoint(func(e *core.Endpoint) {
		e.NetworkVolumes = []string{"vus", "veu"}
		e.DataCenterIDs = []string{"EU", "US"}
	})
	r.submit(ep, 1, false)
	w := r.running(1)[0]
	spec := run.alive[w]
	if spec.Volume == nil || *spec.Volume != vols["veu"] {
		t.Fatalf("spec.Volume = %+v; want the endpoint's EU volume %+v", spec.Volume, vols["veu"])
	}
	run.vmu.Lock()
	defer run.vmu.Unlock()
	if len(run.ensured) != 1 || run.ensured[0] != vols["veu"] {
		t.Errorf("EnsureVolume calls = %+v; want one, for veu", run.ensured)
	}
}

// TestWorkerWithoutItsVolumeNeverRuns: when the volume cannot be made ready, the worker is not
// started, and /health, the workers list and the log say why.
func TestWorkerWithoutItsVolumeNeverRuns(t *testing.T) {
	t.Parallel()
	// Workers run on P; S, in the same data center, stores its volumes (the config says so).
	run := &fakePool{info: core.PoolInfo{ID: "P", GPUs: 4, DataCenter: "EU", Adapter: "fake"}}
	store := &storingPool{fakePool: &fakePool{info: core.PoolInfo{ID: "S", GPUs: 1, DataCenter: "EU", Adapter: "fake"}},
		fail: errors.New("mkdir /volumes/veu: permission denied")}
	vols := map[string]core.Volume{"veu": {ID: "veu", Owner: "alice", SizeGB: 50, DataCenter: "EU"}}
	r := volumeRig(t, run, []pool.Pool{run, store}, vols, map[string]string{"EU": "S"})
	ep := r.endpoint(func(e *core.Endpoint) { e.NetworkVolumes = []string{"veu"} })
	r.submit(ep, 1, false)
	r.settle()
	if n := run.startCalls(); n != 0 {
		t.Fatalf("the pool was asked to start %d workers; want none without their volume", n)
	}
	why := "network volume veu could not be made ready by pool S, which stores the volumes of data center EU: mkdir /volumes/veu: permission denied"
	r.tick(time.Second) // publishes the endpoint's condition
	if h := r.jobs.Health(t.Context(), ep.ID); !strings.Contains(h.Reason, why) {
		t.Errorf("health reason = %q; want it to contain %q", h.Reason, why)
	}
	ws := r.s.EndpointWorkers(ep.ID)
	if len(ws) == 0 {
		t.Errorf("the workers list is empty; want the worker that could not start, saying %q", why)
	}
	for _, w := range ws { // the tick tried again after the backoff
		if w.Status != "EXITED" || !strings.Contains(w.Error, why) {
			t.Errorf("worker %+v; want EXITED saying %q", w, why)
		}
	}
	if n := run.startCalls(); n != 0 {
		t.Errorf("the pool was asked to start %d workers; want none without their volume", n)
	}
}

func TestStoragePool(t *testing.T) {
	t.Parallel()
	plain := &fakePool{info: core.PoolInfo{ID: "plain", DataCenter: "EU", Adapter: "cloud"}}
	a := &storingPool{fakePool: &fakePool{info: core.PoolInfo{ID: "a", DataCenter: "EU"}}}
	b := &storingPool{fakePool: &fakePool{info: core.PoolInfo{ID: "b", DataCenter: "EU"}}}
	us := &storingPool{fakePool: &fakePool{info: core.PoolInfo{ID: "us", DataCenter: "US"}}}
	pools := []pool.Pool{plain, a, b, us, &fakePool{info: core.PoolInfo{ID: "only", DataCenter: "LOCAL", Adapter: "cloud"}}}
	tests := []struct {
		dc       string
		override map[string]string
		want     string // pool id, or the error's start
	}{
		{"EU", nil, "a"},
		{"EU", map[string]string{"EU": "b"}, "b"},
		{"US", map[string]string{"EU": "b"}, "us"},
		{"EU", map[string]string{"EU": "us"}, `volumeStorage names pool "us" for data center EU, but that pool is in US`},
		{"EU", map[string]string{"EU": "plain"}, `volumeStorage names pool "plain" for data center EU, but its adapter (cloud) cannot store network volumes`},
		{"EU", map[string]string{"EU": "nope"}, `volumeStorage names pool "nope" for data center EU, and there is no such pool`},
		{"LOCAL", nil, "no pool in data center LOCAL can store network volumes (its pools: only (cloud))"},
		{"MARS", nil, "no pool is in data center MARS"},
	}
	for _, tc := range tests {
		p, vs, err := StoragePool(pools, tc.override, tc.dc)
		got := ""
		if err != nil {
			got = err.Error()
		} else if vs == nil {
			got = "nil storage"
		} else {
			got = p.Describe().ID
		}
		if got != tc.want {
			t.Errorf("StoragePool(%s, %v) = %q; want %q", tc.dc, tc.override, got, tc.want)
		}
	}
}
