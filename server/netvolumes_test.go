package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
)

// storingPool is servertest's local pool that also stores network volumes and warns that it
// cannot mount them; it records what it was asked.
type storingPool struct {
	*servertest.Pool
	mu      sync.Mutex
	ensured map[string]int
	deleted []string
	mounted []*core.Volume // spec.Volume of each worker started
}

func (p *storingPool) EnsureVolume(_ context.Context, v core.Volume) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ensured[v.ID] = v.SizeGB
	return nil
}

func (p *storingPool) DeleteVolume(_ context.Context, v core.Volume) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deleted = append(p.deleted, v.ID)
	return nil
}

func (p *storingPool) VolumeUsage(context.Context, core.Volume) (int64, error) { return 123, nil }

func (p *storingPool) VolumeWarning() string { return "the volume is at $RUNPOD_VOLUME_PATH" }

func (p *storingPool) Start(ctx context.Context, spec pool.WorkerSpec) error {
	p.mu.Lock()
	p.mounted = append(p.mounted, spec.Volume)
	p.mu.Unlock()
	return p.Pool.Start(ctx, spec)
}

// TestNetworkVolumesWired: the whole server keeps a user's volume in the pool of its data
// center, hands it to the workers of an endpoint naming it, warns of a pool that cannot mount
// it, and removes its data only once no endpoint names it.
func TestNetworkVolumesWired(t *testing.T) {
	t.Parallel()
	sp := &storingPool{Pool: servertest.LocalPool(4), ensured: map[string]int{}}
	s := servertest.New(t, server.Config{}, server.Options{Pools: []pool.Pool{sp}})
	key := servertest.Key(t, s, "alice", core.ScopeAll)
	var v struct{ ID string }
	servertest.Expect(t, "POST", s.URL()+"/v2/network-volumes", key, `{"name":"weights","size":20,"dataCenter":"LOCAL"}`, 201, &v)
	sp.mu.Lock()
	if sp.ensured[v.ID] != 20 {
		t.Errorf("ensured = %v; want %s at 20 GB", sp.ensured, v.ID)
	}
	sp.mu.Unlock()
	if code, body := servertest.Call(t, "GET", s.URL()+"/v2/network-volumes/"+v.ID, key, ""); code != 200 || !strings.Contains(body, `"usedBytes":123`) {
		t.Errorf("get = %d %s; want usedBytes 123", code, body)
	}

	ep := `{"name":"w","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["local"]},"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"min":1,"max":1},"networkVolumes":["` + v.ID + `"]}`
	var e struct{ ID string }
	servertest.Expect(t, "POST", s.URL()+"/v2/serverless", key, ep, 201, &e)
	testkit.Eventually(t, "a worker started with the volume", func() bool {
		sp.mu.Lock()
		defer sp.mu.Unlock()
		return len(sp.mounted) > 0 && sp.mounted[0] != nil && sp.mounted[0].ID == v.ID
	})

	if code, body := servertest.Call(t, "DELETE", s.URL()+"/v2/network-volumes/"+v.ID, key, ""); code != 409 || !strings.Contains(body, e.ID) {
		t.Errorf("delete in use = %d %s; want 409 naming %s", code, body, e.ID)
	}
	servertest.Expect(t, "DELETE", s.URL()+"/v2/serverless/"+e.ID, key, "", 204, nil)
	servertest.Expect(t, "DELETE", s.URL()+"/v2/network-volumes/"+v.ID, key, "", 204, nil)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if len(sp.deleted) != 1 || sp.deleted[0] != v.ID {
		t.Errorf("deleted = %v; want %s", sp.deleted, v.ID)
	}
}

// TestVolumeStorageConfig: volumeStorage must name a pool of its data center that can store
// volumes.
func TestVolumeStorageConfig(t *testing.T) {
	t.Parallel()
	write := func(yaml string) string {
		path := filepath.Join(t.TempDir(), "gantry.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	pools := "pools:\n  - {id: a, gpuType: CPU, count: 1, dataCenterId: EU}\n"
	for yaml, want := range map[string]string{
		pools + "volumeStorage: {EU: b}\n": `volumeStorage[EU]: no pool "b"`,
		pools + "volumeStorage: {US: a}\n": `volumeStorage[US]: pool "a" is in data center "EU"`,
	} {
		if _, err := server.LoadConfig(write(yaml)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadConfig(%q) = %v; want %q", yaml, err, want)
		}
	}
	// A pool whose adapter keeps no volumes is refused when the server starts.
	_, err := server.New(context.Background(), server.Config{Data: t.TempDir(), VolumeStorage: map[string]string{"LOCAL": "local"}},
		server.Options{Pools: []pool.Pool{servertest.LocalPool(1)}})
	if err == nil || !strings.Contains(err.Error(), `volumeStorage names pool "local" for data center LOCAL, but its adapter (process) cannot store network volumes`) {
		t.Errorf("server.New = %v; want the pool refused", err)
	}
}
