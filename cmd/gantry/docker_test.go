package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/gantryhq/gantry/internal/testkit"
)

// TestDockerPool runs `gantry serve` with a docker pool on the local engine: the built-in echo
// worker as a container image FROM scratch (the static gantry binary), jobs through it on a
// FLASHBOOT endpoint (scaled to zero by pausing its container, or by stopping and keeping it,
// and resumed by the next job) and on an OFF one (a fresh container each time), the containers labelled as Gantry's and removed
// when the server stops. It logs the time to the first completed job in each mode, the
// cold-start figures of BENCHMARKS.md. Skipped without an engine unless GANTRY_REQUIRE_DOCKER=1.
func TestDockerPool(t *testing.T) {
	t.Parallel()
	api := dockerEngine(t)
	bin := buildStatic(t)
	image := gantryImage(t, api, bin)
	for _, tc := range []struct{ suspend, state string }{{"pause", "paused"}, {"stop", "exited"}} {
		t.Run(tc.suspend, func(t *testing.T) {
			t.Parallel()
			testDockerPool(t, api, bin, image, tc.suspend, tc.state)
		})
	}
}

// testDockerPool is TestDockerPool with FLASHBOOT suspending by suspend, which leaves a
// suspended worker's container in state.
func testDockerPool(t *testing.T, api *client.Client, bin, image, suspend, state string) {
	pool := fmt.Sprintf("dt-serve-%06x", rand.Uint32()&0xffffff)
	cfg := filepath.Join(t.TempDir(), "gantry.yaml")
	os.WriteFile(cfg, []byte(`pools:
  - {id: local, gpuType: CPU, count: 1, cpu: true}
  - id: `+pool+`
    adapter: docker
    gpuType: CPU
    count: 2
    cpu: true
    docker: {network: host, suspend: `+suspend+`, pull: never, stopGrace: 1s}
`), 0o600)
	t.Cleanup(func() { removeContainers(t, api, "gantry.pool="+pool) }) // after a failure: the server was killed
	data := t.TempDir()
	s := startServe(t, bin, "--data", data, "--config", cfg, "--quota-minute", "0", "--quota-hour", "0", "--quota-day", "0")
	key := newKey(t, bin, data)

	endpoint := func(name, flashboot string) string {
		t.Helper()
		code, body := call(t, "POST", s.base+"/v2/serverless", key, `{"name":"`+name+`","type":"QUEUE","image":"`+image+`","args":"echo",
			"gpu":{"pools":["`+pool+`"]},"flashboot":"`+flashboot+`","workers":{"min":0,"max":1,"idleTimeout":1},
			"scaling":{"type":"QUEUE_DELAY","queueDelay":4}}`)
		if code != 201 {
			t.Fatalf("create endpoint = %d %s", code, body)
		}
		var ep struct{ ID string }
		_ = json.Unmarshal([]byte(body), &ep)
		return ep.ID
	}
	// firstJob runs one job on an endpoint scaled to zero and returns how long it took.
	firstJob := func(ep string) time.Duration {
		t.Helper()
		began := time.Now()
		code, j := jobCall(t, "POST", s.base+"/v2/"+ep+"/runsync", key, `{"input":{"echo":"hi"}}`)
		took := time.Since(began)
		if code != 200 || j.Status != "COMPLETED" || string(j.Output) != `"hi"` {
			t.Fatalf("runsync on %s = %d %+v %s", ep, code, j, j.Output)
		}
		return took
	}
	const runs = 3
	fb, off := endpoint("fb", "FLASHBOOT"), endpoint("off", "OFF")
	var fresh, resumed, offTimes []time.Duration
	fresh = append(fresh, firstJob(fb))
	// The engine's container list lags a little behind the containers' states: poll it.
	testkit.Eventually(t, "one running container of endpoint "+fb+", labelled as Gantry's", func() bool {
		c := containers(t, api, "gantry.endpoint="+fb, "gantry.pool="+pool, "gantry.managed=true")
		return len(c) == 1 && c[0].State == "running"
	})
	for range runs {
		waitHealth(t, s.base+"/v2/"+fb+"/health", key, func(h healthView) bool { return h.Workers.Suspended == 1 })
		testkit.Eventually(t, "one "+state+" container of the scaled-to-zero FLASHBOOT endpoint", func() bool {
			c := containers(t, api, "gantry.endpoint="+fb)
			return len(c) == 1 && c[0].State == state
		})
		resumed = append(resumed, firstJob(fb))
	}
	for range runs {
		offTimes = append(offTimes, firstJob(off))
		waitHealth(t, s.base+"/v2/"+off+"/health", key, func(h healthView) bool {
			return h.Workers.Idle+h.Workers.Running+h.Workers.Initializing+h.Workers.Suspended == 0
		})
		testkit.Eventually(t, "the OFF endpoint's container is removed", func() bool { return len(containers(t, api, "gantry.endpoint="+off)) == 0 })
	}
	t.Logf("time to the first completed job on a scaled-to-zero endpoint, docker pool (echo image FROM scratch): FLASHBOOT (suspend: %s) resume %v (the first, a fresh container: %v); OFF %v",
		suspend, resumed, fresh[0], offTimes)
	s.stop(t)
	if left := containers(t, api, "gantry.pool="+pool); len(left) > 0 {
		t.Errorf("containers left after the server stopped: %+v; want none", left)
	}
}

// dockerEngine returns a client of the local engine, or skips the test (fails it with
// GANTRY_REQUIRE_DOCKER=1) when none answers.
func dockerEngine(t *testing.T) *client.Client {
	t.Helper()
	api, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err = api.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
			api.Close()
		}
	}
	if err != nil {
		if os.Getenv("GANTRY_REQUIRE_DOCKER") == "1" {
			t.Fatalf("no Docker engine: %v (GANTRY_REQUIRE_DOCKER=1)", err)
		}
		t.Skipf("no Docker engine (%v); set GANTRY_REQUIRE_DOCKER=1 to fail instead", err)
	}
	t.Cleanup(func() { api.Close() })
	return api
}

// buildStatic builds the gantry binary statically: it also runs FROM scratch.
func buildStatic(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gantry")
	cmd := exec.Command("go", "build", "-o", path, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return path
}

// gantryImage builds an image FROM scratch running `gantry worker ARGS` from the static
// binary, tagged with the binary's hash, unless the engine has it.
func gantryImage(t *testing.T, api *client.Client, bin string) string {
	t.Helper()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	tag := "gantry-dockertest/gantry-worker:" + hex.EncodeToString(sum[:6])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := api.ImageInspect(ctx, tag); err == nil {
		return tag
	} else if !cerrdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		body []byte
	}{
		{"Dockerfile", 0o644, []byte("FROM scratch\nCOPY gantry /gantry\nENTRYPOINT [\"/gantry\", \"worker\"]\n")},
		{"gantry", 0o755, b},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body))}); err != nil {
			t.Fatal(err)
		}
		tw.Write(f.body)
	}
	tw.Close()
	res, err := api.ImageBuild(ctx, &buf, client.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	for {
		var msg struct{ Error string }
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if msg.Error != "" {
			t.Fatalf("building %s: %s", tag, msg.Error)
		}
	}
	return tag
}

// container is what the tests look at of a container.
type container struct {
	Name, State string
}

// containers lists the containers with all the labels given ("key=value").
func containers(t *testing.T, api *client.Client, labels ...string) []container {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", labels...)})
	if err != nil {
		t.Fatal(err)
	}
	var out []container
	for _, c := range list.Items {
		out = append(out, container{Name: strings.Join(c.Names, ","), State: string(c.State)})
	}
	return out
}

// removeContainers removes the containers with all the labels given, saying so: a test that
// stopped its server cleanly leaves none.
func removeContainers(t *testing.T, api *client.Client, labels ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", labels...)})
	if err != nil {
		t.Error(err)
		return
	}
	for _, c := range list.Items {
		t.Logf("removing container %v, left behind", c.Names)
		_, _ = api.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
	}
}
