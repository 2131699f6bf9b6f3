package conformance

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/gantryhq/gantry/server/servertest"
)

// gantry is the Gantry under test: its base URL, a full-access key of user alice, and the
// docker pool's volume root (a host directory bind-mounted into Gantry's container at the
// same path, so that the paths Gantry makes are the ones the engine mounts).
var gantry struct {
	base, key string
	volumes   string
	ctr       testcontainers.Container
}

// Images the suite builds; endpoints name the worker images.
const (
	gantryImage   = "gantry:conformance"
	echoImage     = "gantry/echo"
	httpEchoImage = "gantry/http-echo"
	volumeImage   = "gantry-conformance/volworker" // testdata/volworker
	poolID        = "docker"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// The reaper image cannot be pulled here, and the machine looks like a container to
	// testcontainers (notes/deps.md).
	os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Containers join the host network only: with `dockerd --bridge=none` there is no bridge,
	// and testcontainers would otherwise create one and attach every container to it.
	provider, err := testcontainers.NewDockerProvider(testcontainers.DefaultNetwork("host")) //nolint:staticcheck // deprecated without a replacement for the provider's default network
	if err == nil {
		err = provider.Health(ctx)
	}
	if err != nil {
		if os.Getenv("GANTRY_REQUIRE_DOCKER") == "1" {
			fmt.Fprintf(os.Stderr, "conformance: no Docker engine, and GANTRY_REQUIRE_DOCKER=1: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "conformance: skipped: no Docker engine (%v); start one (see README) to run the suite\n", err)
		return 0
	}
	defer provider.Close()
	stop, err := start(ctx, provider)
	if err != nil {
		fmt.Fprintf(os.Stderr, "conformance: starting Gantry: %v\n", err)
		return 1
	}
	code := m.Run()
	if code != 0 && gantry.ctr != nil {
		if logs, err := gantry.ctr.Logs(context.Background()); err == nil {
			b, _ := io.ReadAll(logs)
			fmt.Fprintf(os.Stderr, "--- gantry container log (last 8 KB) ---\n%s\n", tail(b, 8<<10))
		}
	}
	stop()
	return code
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// start builds the binary and the images, starts Gantry in a container on a free port of the
// host network, and issues alice's key inside it.
func start(ctx context.Context, provider *testcontainers.DockerProvider) (stop func(), err error) {
	dir, err := os.MkdirTemp("", "gantry-conformance-")
	if err != nil {
		return nil, err
	}
	stop = func() { os.RemoveAll(dir) }
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(dir, "gantry"), "./cmd/gantry")
	build.Dir, build.Env = "..", append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return stop, fmt.Errorf("building the static binary: %v\n%s", err, out)
	}
	volworker := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(dir, "volworker"), "./testdata/volworker")
	volworker.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := volworker.CombinedOutput(); err != nil {
		return stop, fmt.Errorf("building testdata/volworker: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "volworker.Dockerfile"),
		[]byte("FROM scratch\nCOPY volworker /volworker\nENTRYPOINT [\"/volworker\"]\n"), 0o644); err != nil {
		return stop, err
	}
	for _, f := range []string{"gantry.Dockerfile", "worker.Dockerfile"} {
		b, err := os.ReadFile(filepath.Join("..", "build", f))
		if err != nil {
			return stop, err
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return stop, err
		}
	}
	for _, img := range []struct {
		repo, dockerfile, worker string
	}{{"gantry", "gantry.Dockerfile", ""}, {echoImage, "worker.Dockerfile", "echo"}, {httpEchoImage, "worker.Dockerfile", "http-echo"},
		{volumeImage, "volworker.Dockerfile", ""}} {
		tag := "latest"
		if img.repo == "gantry" {
			tag = "conformance"
		}
		fd := testcontainers.FromDockerfile{Context: dir, Dockerfile: img.dockerfile, Repo: img.repo, Tag: tag, KeepImage: true,
			BuildLogWriter: io.Discard}
		if img.worker != "" {
			w := img.worker
			fd.BuildArgs = map[string]*string{"WORKER": &w}
		}
		if _, err := provider.BuildImage(ctx, &testcontainers.ContainerRequest{FromDockerfile: fd}); err != nil {
			return stop, fmt.Errorf("building %s: %w", img.repo, err)
		}
	}

	port, err := freePort()
	if err != nil {
		return stop, err
	}
	// Gantry runs in a container and the engine mounts host paths: the volume root must be
	// the same path in both (docs/pools.md).
	gantry.volumes = filepath.Join(dir, "volumes")
	if err := os.Mkdir(gantry.volumes, 0o700); err != nil {
		return stop, err
	}
	config := filepath.Join(dir, "gantry.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`
quota: {minute: 100000, hour: 1000000, day: 10000000}
pools:
  - {id: %s, adapter: docker, gpuType: CPU, displayName: CPU slot, count: 16, maxGpusPerWorker: 1, cpu: true, vcpus: 2, memoryPerVcpu: 1, dataCenterId: LOCAL,
     docker: {volumeRoot: %s}}
autoscaler: {stableWindow: 10, panicWindow: 2}
`, poolID, gantry.volumes)), 0o644); err != nil {
		return stop, err
	}
	addr := net.JoinHostPort("127.0.0.1", port)
	ctr, err := provider.RunContainer(ctx, testcontainers.ContainerRequest{
		Image: gantryImage,
		Cmd:   []string{"serve", "--listen", addr, "--data", "/data", "--config", "/etc/gantry.yaml"},
		Files: []testcontainers.ContainerFile{{HostFilePath: config, ContainerFilePath: "/etc/gantry.yaml", FileMode: 0o644}},
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
			hc.Binds = append(hc.Binds, "/var/run/docker.sock:/var/run/docker.sock", gantry.volumes+":"+gantry.volumes)
		},
		WaitingFor: wait.ForLog("Gantry is listening on").WithStartupTimeout(60 * time.Second),
	})
	if err != nil {
		return stop, err
	}
	gantry.ctr = ctr
	gantry.base = "http://" + addr
	prevStop := stop
	stop = func() {
		_ = ctr.Terminate(context.Background(), testcontainers.StopTimeout(10*time.Second))
		prevStop()
	}
	if gantry.key, err = newKey(ctx, "alice"); err != nil {
		return stop, err
	}
	return stop, waitReady(ctx)
}

// newKey issues a key inside the Gantry container, as `gantry keys create` does for a user.
func newKey(ctx context.Context, user string, flags ...string) (string, error) {
	code, out, err := gantry.ctr.Exec(ctx, append([]string{"/gantry", "keys", "create", "--data", "/data", "--user", user}, flags...), tcexec.Multiplexed())
	if err != nil {
		return "", err
	}
	b, _ := io.ReadAll(out)
	if code != 0 {
		return "", fmt.Errorf("gantry keys create: exit %d: %s", code, b)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

func waitReady(ctx context.Context) error {
	for {
		if resp, err := http.Get(gantry.base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port, nil
}

// response is one HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request to Gantry; auth is the Authorization header as sent ("" = none).
func do(t *testing.T, method, path, auth, body string) response {
	t.Helper()
	status, header, b := servertest.Do(t, method, gantry.base+path, auth, body)
	return response{status: status, header: header, body: b}
}
