package docker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/moby/moby/api/pkg/authconfig"
	"github.com/moby/moby/api/types/container"

	"github.com/gantryhq/gantry/adapters/adaptertest"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// TestCreateOptions: what a spec becomes on GPU and CPU pools, with devices by request or by
// env, with and without a disk quota and init.
func TestCreateOptions(t *testing.T) {
	t.Parallel()
	gpu := core.PoolInfo{ID: "gpu pool", GPUType: "H100", GPUs: 3}
	spec := pool.WorkerSpec{ID: "ep1-w1", Endpoint: "ep1", Image: "me/worker:1", Args: " --model  small ", Disk: 20,
		GPUs: []int{2, 0}, Env: map[string]string{"A": "1", "NVIDIA_VISIBLE_DEVICES": "all", "PORT": "80"}}
	for _, tc := range []struct {
		name     string
		pool     *Pool
		spec     pool.WorkerSpec
		env      []string
		requests []container.DeviceRequest
		storage  map[string]string
		init     bool
	}{
		{
			name: "device request", pool: &Pool{desc: gpu, devices: []string{"GPU-a", "GPU-b", "GPU-c"}}, spec: spec,
			env:      []string{"A=1", "PORT=8123"},
			requests: []container.DeviceRequest{{Driver: "nvidia", DeviceIDs: []string{"GPU-c", "GPU-a"}, Capabilities: [][]string{{"gpu"}}}},
		},
		{
			name: "by env, disk quota, init", pool: &Pool{desc: gpu, cfg: Config{GPUsByEnv: true, DiskQuota: true, Init: true}}, spec: spec,
			env: []string{"A=1", "NVIDIA_VISIBLE_DEVICES=2,0", "PORT=8123"}, storage: map[string]string{"size": "20G"}, init: true,
		},
		{
			name: "no GPUs on a GPU pool", pool: &Pool{desc: gpu}, spec: func() pool.WorkerSpec { s := spec; s.GPUs = nil; return s }(),
			env: []string{"A=1", "NVIDIA_VISIBLE_DEVICES=void", "PORT=8123"},
		},
		{
			name: "CPU pool", pool: &Pool{desc: core.PoolInfo{ID: "cpu", GPUType: "CPU", GPUs: 2, CPU: true}}, spec: func() pool.WorkerSpec { s := spec; s.GPUs = nil; return s }(),
			env: []string{"A=1", "NVIDIA_VISIBLE_DEVICES=all", "PORT=8123"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := tc.pool.createOptions(tc.spec, "gantry-x-ep1-w1", map[string]string{"PORT": "8123"})
			c, h := opts.Config, opts.HostConfig
			if opts.Name != "gantry-x-ep1-w1" || c.Image != "me/worker:1" || !slices.Equal(c.Cmd, []string{"--model", "small"}) {
				t.Errorf("name %q, image %q, cmd %q; want gantry-x-ep1-w1, me/worker:1, [--model small]", opts.Name, c.Image, c.Cmd)
			}
			if !slices.Equal(c.Env, tc.env) {
				t.Errorf("env %q; want %q", c.Env, tc.env)
			}
			wantLabels := map[string]string{LabelManaged: "true", LabelPool: tc.pool.desc.ID, LabelWorker: "ep1-w1", LabelEndpoint: "ep1"}
			if !reflect.DeepEqual(c.Labels, wantLabels) {
				t.Errorf("labels %v; want %v", c.Labels, wantLabels)
			}
			if !reflect.DeepEqual(h.DeviceRequests, tc.requests) {
				t.Errorf("device requests %+v; want %+v", h.DeviceRequests, tc.requests)
			}
			if !reflect.DeepEqual(h.StorageOpt, tc.storage) {
				t.Errorf("storage options %v; want %v", h.StorageOpt, tc.storage)
			}
			if got := h.Init != nil && *h.Init; got != tc.init {
				t.Errorf("init %v; want %v", got, tc.init)
			}
			if h.NetworkMode != "host" || !reflect.DeepEqual(h.LogConfig, logOptions) {
				t.Errorf("network %q, log %+v; want host, %+v", h.NetworkMode, h.LogConfig, logOptions)
			}
		})
	}
	if got := (&Pool{desc: gpu}).createOptions(pool.WorkerSpec{ID: "w", Image: "i"}, "n", nil).Config.Cmd; got != nil {
		t.Errorf("cmd without args = %q; want nil (the image's own)", got)
	}
}

// TestNames: container names and the worker ids that may make them.
func TestNames(t *testing.T) {
	t.Parallel()
	if got := containerName("eu/west 1", "ep-x_1.2"); got != "gantry-eu-west-1-ep-x_1.2" {
		t.Errorf(`containerName("eu/west 1", "ep-x_1.2") = %q; want gantry-eu-west-1-ep-x_1.2`, got)
	}
	for id, want := range map[string]bool{
		"ep-abc12345": true, "at12ab-1": true, "_x": true, "": false, ".hidden": false, "-flag": false,
		"a/b": false, "..": false, "a b": false, strings.Repeat("a", 128): true, strings.Repeat("a", 129): false,
	} {
		if got := validID(id); got != want {
			t.Errorf("validID(%q) = %v; want %v", id, got, want)
		}
	}
}

// TestNewRefuses: New names what is wrong with a config before it dials the engine.
func TestNewRefuses(t *testing.T) {
	t.Parallel()
	ok := core.PoolInfo{ID: "p", GPUType: "CPU", GPUs: 1, CPU: true}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no id", Config{Pool: core.PoolInfo{GPUType: "CPU", GPUs: 1}}, "needs an ID and a GPUType"},
		{"other adapter", Config{Pool: core.PoolInfo{ID: "p", Adapter: "process", GPUType: "CPU", GPUs: 1}}, `adapter "process"; want docker`},
		{"no GPUs", Config{Pool: core.PoolInfo{ID: "p", GPUType: "CPU"}}, "want count > 0"},
		{"bad CUDA", Config{Pool: core.PoolInfo{ID: "p", GPUType: "X", GPUs: 1, CUDAVersions: []string{"12"}}}, `CUDA version "12" is not major.minor`},
		{"bridge", Config{Pool: ok, Network: "bridge"}, `network "bridge": only host networking`},
		{"devices", Config{Pool: core.PoolInfo{ID: "p", GPUType: "X", GPUs: 2}, Devices: []string{"a"}}, "1 device names for 2 GPUs"},
		{"grace", Config{Pool: ok, StopGrace: -1}, "is negative"},
		{"suspend", Config{Pool: ok, Suspend: "freeze"}, `suspend mode "freeze"`},
		{"pull", Config{Pool: ok, Pull: "always"}, `pull policy "always"`},
		{"no engine", Config{Pool: ok, Host: "unix://" + filepath.Join(os.TempDir(), "gantry-no-such.sock")}, "does not answer"},
	} {
		p, err := New(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s) = %v, %v; want an error containing %q", tc.name, p, err, tc.want)
		}
	}
}

// fakeEngine is an Engine API server that knows no image and answers every pull with an
// error; it records the pulls' query and X-Registry-Auth header.
type fakeEngine struct {
	mu    sync.Mutex
	pulls []http.Header // the header of each pull, with the query's fromImage and tag added
}

func (e *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if i := strings.Index(path[1:], "/"); strings.HasPrefix(path, "/v1.") && i > 0 {
		path = path[i+1:] // strip the API version
	}
	w.Header().Set("Api-Version", "1.41")
	switch {
	case path == "/_ping":
		fmt.Fprint(w, "OK")
	case path == "/containers/json":
		fmt.Fprint(w, "[]")
	case strings.HasPrefix(path, "/images/") && strings.HasSuffix(path, "/json"):
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"message":"No such image"}`)
	case path == "/images/create":
		h := r.Header.Clone()
		h.Set("X-From-Image", r.URL.Query().Get("fromImage"))
		h.Set("X-Tag", r.URL.Query().Get("tag"))
		e.mu.Lock()
		e.pulls = append(e.pulls, h)
		e.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"status":"Pulling from private/worker"}`+"\n"+`{"errorDetail":{"message":"denied: the fake registry says no"},"error":"denied: the fake registry says no"}`+"\n")
	default:
		http.Error(w, `{"message":"not in the fake"}`, http.StatusNotImplemented)
	}
}

// TestRegistryAuth: a pull sends the credential of the endpoint's registry id (encoded as the
// engine expects), none for an endpoint without one; a failed pull says so clearly.
func TestRegistryAuth(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	creds := map[string]Credential{"reg-1": {Username: "alice", Password: "s3cret", ServerAddress: "registry.example"}}
	var asked []string
	var mu sync.Mutex
	p, err := New(context.Background(), Config{
		Pool: core.PoolInfo{ID: "fake", GPUType: "CPU", GPUs: 2, CPU: true},
		Host: "tcp://" + srv.Listener.Addr().String(),
		Credentials: func(_ context.Context, id string) (Credential, error) {
			mu.Lock()
			asked = append(asked, id)
			mu.Unlock()
			c, ok := creds[id]
			if !ok {
				return Credential{}, errors.New("no such credential")
			}
			return c, nil
		},
	})
	if err != nil {
		t.Fatalf("New on the fake engine = %v", err)
	}
	t.Cleanup(func() { p.Close() })
	rec := &adaptertest.Recorder{}
	registries := map[string]string{"ep-private": "reg-1", "ep-broken": "reg-gone"}
	start := func(id, endpoint string) error {
		return p.Start(context.Background(), pool.WorkerSpec{ID: id, Endpoint: endpoint, Registry: registries[endpoint],
			Image: "registry.example/private/worker:2", Report: rec.Report})
	}

	err = start("w1", "ep-private")
	const want = `image "registry.example/private/worker:2" is not on this Docker host and could not be pulled: denied: the fake registry says no`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Start with a refused pull = %v; want an error containing %q", err, want)
	}
	if err := start("w2", "ep-public"); err == nil {
		t.Errorf("Start(ep-public) = nil; want the pull's error")
	}
	err = start("w3", "ep-broken")
	if err == nil || !strings.Contains(err.Error(), `registry credential "reg-gone" of endpoint ep-broken: no such credential`) {
		t.Errorf("Start with an unknown credential = %v; want an error naming it", err)
	}

	fake.mu.Lock()
	pulls := slices.Clone(fake.pulls)
	fake.mu.Unlock()
	if len(pulls) != 2 {
		t.Fatalf("%d pulls; want 2 (ep-private, ep-public; none without a credential)", len(pulls))
	}
	if from, tag := pulls[0].Get("X-From-Image"), pulls[0].Get("X-Tag"); from != "registry.example/private/worker" || tag != "2" {
		t.Errorf("pull of fromImage=%q tag=%q; want registry.example/private/worker, 2", from, tag)
	}
	got, err := authconfig.Decode(pulls[0].Get("X-Registry-Auth"))
	if err != nil || got.Username != "alice" || got.Password != "s3cret" || got.ServerAddress != "registry.example" {
		t.Errorf("X-Registry-Auth of ep-private decodes to %+v, %v; want alice's credential for registry.example", got, err)
	}
	if auth := pulls[1].Get("X-Registry-Auth"); auth != "" {
		if got, err := authconfig.Decode(auth); err != nil || got.Username != "" || got.Password != "" {
			t.Errorf("X-Registry-Auth of ep-public decodes to %+v, %v; want no credential", got, err)
		}
	}
	if want := []string{"reg-1", "reg-gone"}; !slices.Equal(asked, want) {
		t.Errorf("Credentials asked for %q; want %q", asked, want)
	}
	if evs := rec.Events(""); len(evs) > 0 {
		t.Errorf("events after refused starts: %s; want none", adaptertest.FormatEvents(evs))
	}
}
