package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/adapters/process"
	"github.com/gantryhq/gantry/core"
)

// TestDockerConfig: docker pools and registries in the config file, what is refused, and the
// credential lookup docker pools pull with.
func TestDockerConfig(t *testing.T) {
	t.Parallel()
	load := func(yaml string) (Config, error) {
		path := filepath.Join(t.TempDir(), "gantry.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return LoadConfig(path)
	}
	c, err := load(`pools:
  - {id: local, gpuType: CPU, count: 1, cpu: true}
  - id: dock
    adapter: docker
    gpuType: NVIDIA L4
    count: 2
    docker: {host: "tcp://10.0.0.5:2375", suspend: stop, pull: never, stopGrace: 3s, devices: [GPU-a, GPU-b], init: true}
registries:
  - {id: reg-a, username: alice, password: pw, server: ghcr.io}
  - {id: reg-b, username: bob, passwordEnv: PATH}
  - {id: reg-c, username: carol, passwordEnv: GANTRY_TEST_SURELY_UNSET_VARIABLE}
`)
	if err != nil {
		t.Fatalf("LoadConfig = %v", err)
	}
	d := c.Pools[1]
	if d.Adapter != "docker" || d.GPUs != 2 || d.Docker == nil || d.Docker.Host != "tcp://10.0.0.5:2375" || d.Docker.Suspend != "stop" ||
		d.Docker.StopGrace != 3*time.Second || strings.Join(d.Docker.Devices, ",") != "GPU-a,GPU-b" || !d.Docker.Init || c.Pools[0].Adapter != "process" {
		t.Errorf("pools = %+v, docker %+v; want the docker pool as written and local on the process adapter", c.Pools, d.Docker)
	}
	if got := c.catalogPools(); len(got) != 2 || got[1].ID != "dock" || got[1].DisplayName != "NVIDIA L4" {
		t.Errorf("catalogPools() = %+v; want both pools, defaults filled in", got)
	}
	ctx := context.Background()
	if cred, err := c.credential(ctx, "reg-a"); err != nil || cred.Username != "alice" || cred.Password != "pw" || cred.Server != "ghcr.io" {
		t.Errorf("credential(reg-a) = %+v, %v; want alice's", cred, err)
	}
	if cred, err := c.credential(ctx, "reg-b"); err != nil || cred.Password != os.Getenv("PATH") {
		t.Errorf("credential(reg-b) = %+v, %v; want the password from $PATH", cred, err)
	}
	for id, want := range map[string]string{"reg-c": "$GANTRY_TEST_SURELY_UNSET_VARIABLE is empty", "reg-x": `no registry "reg-x"`} {
		if _, err := c.credential(ctx, id); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("credential(%s) = %v; want an error containing %q", id, err, want)
		}
	}

	for yaml, want := range map[string]string{
		"pools: [{id: p, gpuType: CPU, count: 1, docker: {}}]":                               "a docker section needs adapter: docker",
		"pools: [{id: p, adapter: k8s, gpuType: CPU, count: 1}]":                             `unknown adapter "k8s" (available: docker, kubernetes, process, runpod)`,
		"pools: [{id: p, gpuType: X, count: 1, runpod: {apiKeyEnv: K}}]":                     "a runpod section needs adapter: runpod",
		"pools: [{id: p, adapter: docker, gpuType: CPU, count: 1, docker: {hots: x}}]":       "pools[0].docker.hots: unknown key",
		"registries: [{id: r, username: u}]":                                                 "give password or passwordEnv",
		"registries: [{id: r, username: u, password: p, passwordEnv: P}]":                    "give password or passwordEnv",
		"registries: [{id: r, password: p}]":                                                 "id and username are required",
		"registries: [{id: r, username: u, password: p}, {id: r, username: v, password: q}]": `registry "r" is declared twice`,
	} {
		if _, err := load(yaml); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadConfig(%s) = %v; want an error containing %q", yaml, err, want)
		}
	}
}

func TestRunPodConfig(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gantry.yaml")
	yaml := `pools:
  - id: burst
    adapter: runpod
    gpuType: NVIDIA GeForce RTX 4090
    count: 8
    runpod: {apiKeyEnv: RUNPOD_API_KEY, publicUrl: "https://g.example", maxPods: 4, stock: {LOW: 2, MEDIUM: 4}, catalogEvery: 30s}
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatalf("LoadConfig = %v", err)
	}
	r := c.Pools[0].RunPod
	if r == nil || r.MaxPods != 4 || r.Stock["LOW"] != 2 || r.Stock["MEDIUM"] != 4 || len(r.Stock) != 2 || r.CatalogEvery != 30*time.Second {
		t.Errorf("runpod section = %+v; want maxPods 4, stock LOW 2 and MEDIUM 4, catalogEvery 30s", r)
	}
}

// TestProcessConfig: a process pool's section, and a refused user (adapters/process tests
// the user its workers run as by default).
func TestProcessConfig(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gantry.yaml")
	if err := os.WriteFile(path, []byte("pools:\n  - {id: local, gpuType: CPU, count: 1, cpu: true, process: {user: gantry-worker}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(path)
	if err != nil || c.Pools[0].Process == nil || c.Pools[0].Process.User != "gantry-worker" {
		t.Fatalf("LoadConfig = %+v, %v; want the process section", c.Pools, err)
	}
	if err := os.WriteFile(path, []byte("pools: [{id: p, adapter: docker, gpuType: CPU, count: 1, process: {user: x}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path); err == nil || !strings.Contains(err.Error(), "a process section needs adapter: process") {
		t.Errorf("a process section on a docker pool: %v; want a refusal", err)
	}

	cfg := &Config{Data: t.TempDir(), Pools: []PoolConfig{{PoolInfo: core.PoolInfo{ID: "local", GPUType: "CPU", GPUs: 1, CPU: true}, Process: &process.Config{User: "root"}}}}
	if _, err := newPools(context.Background(), cfg, "", nil, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), `user "root" is root`) {
		t.Errorf("a process pool with user root: %v; want a refusal", err)
	}
}
