package docker

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
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// requireEnv names the variable that turns a missing Docker engine from a skip into a failure
// (CI sets it).
const requireEnv = "GANTRY_REQUIRE_DOCKER"

// engine is the Docker engine the tests run against, and the test worker image built on it
// (testdata/worker, FROM scratch): err says why there is none.
var engine struct {
	api   *client.Client
	image string
	err   error
}

func TestMain(m *testing.M) {
	engine.api, engine.image, engine.err = prepareEngine()
	code := m.Run()
	if engine.api != nil {
		engine.api.Close()
	}
	os.Exit(code)
}

// requireEngine skips the test when no Docker engine answers, or fails it when requireEnv is
// set to 1.
func requireEngine(t testing.TB) {
	t.Helper()
	if engine.err == nil {
		return
	}
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("%v (%s=1: a Docker engine is required)", engine.err, requireEnv)
	}
	t.Skipf("%v; start one (dockerd --bridge=none --iptables=false) or set DOCKER_HOST, or set %s=1 to fail instead", engine.err, requireEnv)
}

// prepareEngine connects to the engine of $DOCKER_HOST (default the local socket) and builds
// the test worker image on it, unless an image of the same binary is there already.
func prepareEngine() (*client.Client, string, error) {
	host := cmpOr(os.Getenv(client.EnvOverrideHost), client.DefaultDockerHost)
	api, err := newClient(host, true)
	if err != nil {
		return nil, "", fmt.Errorf("no Docker engine client for %s: %w", host, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := api.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		api.Close()
		return nil, "", fmt.Errorf("no Docker engine answers at %s: %w", host, err)
	}
	image, err := buildWorkerImage(api)
	if err != nil {
		api.Close()
		return nil, "", fmt.Errorf("building the test worker image: %w", err)
	}
	return api, image, nil
}

func cmpOr(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// buildWorkerImage builds testdata/worker as a static binary and an image FROM scratch
// holding it, tagged with the binary's hash. It returns the tag.
func buildWorkerImage(api *client.Client) (string, error) {
	dir, err := os.MkdirTemp("", "gantry-dockertest")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "worker")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./testdata/worker")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./testdata/worker: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	tag := "gantry-dockertest/worker:" + hex.EncodeToString(sum[:6])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := api.ImageInspect(ctx, tag); err == nil {
		return tag, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", err
	}
	files := map[string][]byte{
		"Dockerfile": []byte("FROM scratch\nCOPY worker /worker\nENTRYPOINT [\"/worker\"]\n"),
		"worker":     b,
	}
	if err := buildImage(ctx, api, tag, files); err != nil {
		return "", err
	}
	return tag, nil
}

// buildImage builds an image tagged tag from a build context of files (name -> content; a
// file named "worker" or "gantry" is executable).
func buildImage(ctx context.Context, api *client.Client, tag string, files map[string][]byte) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, content := range files {
		mode := int64(0o644)
		if name == "worker" || name == "gantry" {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(content))}); err != nil {
			return err
		}
		if _, err := tw.Write(content); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	res, err := api.ImageBuild(ctx, &buf, client.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	var log bytes.Buffer
	for {
		var msg struct {
			Stream string `json:"stream"`
			Error  string `json:"error"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
		log.WriteString(msg.Stream)
		if msg.Error != "" {
			return fmt.Errorf("%s\n%s", msg.Error, log.String())
		}
	}
	if _, err := api.ImageInspect(ctx, tag); err != nil {
		return fmt.Errorf("the build reported no error, yet: %w\n%s", err, log.String())
	}
	return nil
}

// testPoolID returns a pool id unique to this test run, so that tests sharing an engine (and
// other Gantry runs on it) never remove each other's containers.
func testPoolID(name string) string {
	return fmt.Sprintf("dt-%s-%06x", name, rand.Uint32()&0xffffff)
}
