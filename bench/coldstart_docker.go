package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/gantryhq/gantry/adapters/docker"
)

// The coldstart-docker scenario (issue 5): the coldstart scenario with the endpoint's workers
// run as containers by a docker pool. The echo worker image is built FROM scratch with
// build/worker.Dockerfile from a static build of ./cmd/gantry, and tagged gantry/echo:bench-<hash of
// the binary> so that the gantry/echo:latest other work on the same engine uses is left alone.

// dockerVariant is one measured mode of the docker cold-start scenario: a flashboot value on
// a pool with a suspend mode, whose suspended workers' containers are in state.
type dockerVariant struct {
	label, flashboot, pool, suspend, state string
}

func (b *bench) scenarioColdStartDocker() error {
	api, err := dockerClient()
	if err != nil {
		logf("coldstart-docker: skipped: %v", err)
		b.sections = append(b.sections, section{noBare: true, title: "8. Cold start with the Docker adapter (echo image FROM scratch)",
			setup: "Not measured.",
			rows: []row{{metric: "flashboot OFF and FLASHBOOT: POST /runsync to COMPLETED on a scaled-to-zero endpoint",
				gantry: "skipped: no Docker engine answered (" + err.Error() + ")", target: "<= 1 s OFF, <= 300 ms FLASHBOOT", verdict: "not measured"}},
			notes: []string{"Start one (`dockerd --bridge=none --iptables=false`, or set DOCKER_HOST) and run `go run ./bench -only coldstart-docker`."}})
		return nil
	}
	defer func() { _ = api.Close() }()
	engine := "unknown"
	if v, err := api.ServerVersion(context.Background(), client.ServerVersionOptions{}); err == nil {
		engine = fmt.Sprintf("Docker Engine %s (API %s), storage driver %s", v.Version, v.APIVersion, dockerInfo(api))
	}
	image, built, err := b.echoImage(api)
	if err != nil {
		return err
	}
	var suffix [3]byte
	_, _ = rand.Read(suffix[:])
	prefix := "bench-" + hex.EncodeToString(suffix[:])
	pools := []struct{ id, suspend string }{{prefix + "-pause", "pause"}, {prefix + "-stop", "stop"}}
	var yaml strings.Builder
	for _, p := range pools {
		fmt.Fprintf(&yaml, "  - id: %s\n    adapter: docker\n    gpuType: CPU\n    displayName: CPU slot (docker)\n    count: 2\n    maxGpusPerWorker: 1\n    cpu: true\n"+
			"    docker: {network: host, suspend: %s, pull: never, stopGrace: 1s}\n", p.id, p.suspend)
	}
	defer removeLeftovers(api, pools[0].id, pools[1].id) // after a failure: a clean stop leaves none
	g, err := b.startGantryPools("coldstart-docker", yaml.String())
	if err != nil {
		return err
	}
	defer g.stop()
	variants := []dockerVariant{
		{label: "OFF", flashboot: "OFF", pool: pools[0].id, suspend: "pause"},
		{label: "FLASHBOOT (suspend: pause, the default)", flashboot: "FLASHBOOT", pool: pools[0].id, suspend: "pause", state: "paused"},
		{label: "FLASHBOOT (suspend: stop)", flashboot: "FLASHBOOT", pool: pools[1].id, suspend: "stop", state: "exited"},
	}
	var modes []coldMode
	for _, v := range variants {
		tgt := coldTarget{
			create: func(name, flashboot string) (string, error) {
				body := fmt.Sprintf(`{"name":%q,"type":"QUEUE","image":%q,"gpu":{"pools":[%q]},`+
					`"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"min":0,"max":1,"idleTimeout":1},"flashboot":%q}`, name, image, v.pool, flashboot)
				return g.postEndpoint(name, body)
			},
			waitZero: func(ep string, suspended bool, timeout time.Duration) (time.Duration, string, error) {
				return g.waitContainersZero(api, ep, suspended, v.state, timeout)
			},
		}
		m, err := b.coldMode(g, v.flashboot, v.label, tgt)
		if err != nil {
			return fmt.Errorf("%s: %w", v.label, err)
		}
		modes = append(modes, m)
	}
	g.stop()
	left := containersOf(api, "gantry.pool="+pools[0].id)
	left = append(left, containersOf(api, "gantry.pool="+pools[1].id)...)

	sec := section{noBare: true, title: "8. Cold start with the Docker adapter: the first job on a scaled-to-zero endpoint (echo image FROM scratch)",
		setup: fmt.Sprintf("`gantry serve` as above with two more pools on the local engine (%s), each `adapter: docker`, 2 CPU slots, "+
			"`docker: {network: host, pull: never, stopGrace: 1s}`, one with `suspend: pause` (the default) and one with `suspend: stop`. "+
			"The worker image %s is build/worker.Dockerfile (FROM scratch, `ENTRYPOINT [\"/gantry\", \"worker\"]`, GANTRY_WORKER=echo) over a static build of ./cmd/gantry "+
			"(`CGO_ENABLED=0 go build -trimpath`)%s. "+
			"For each variant an endpoint with `\"image\"` set to it on that pool, workers.min 0, workers.max 1, workers.idleTimeout 1 s, QUEUE_DELAY 4 s. "+
			"Before each run the bench waits until GET /v2/{id}/health shows no idle, running or initializing worker and nothing queued, and the engine agrees "+
			"(containers labelled gantry.endpoint={id}: OFF none; FLASHBOOT only ones in state paused, or exited for suspend: stop, and health workers.suspended >= 1). "+
			"The clock starts before the POST /v2/{id}/runsync {\"input\":{\"echo\":1}} is written to a keep-alive connection and stops when the whole COMPLETED answer is read. "+
			"%d runs per variant; each FLASHBOOT variant makes one more run first, a fresh container (nothing is suspended yet), which is not counted.",
			engine, image, built, b.o.coldN)}
	targets := map[string]time.Duration{"OFF": time.Second, "FLASHBOOT": 300 * time.Millisecond}
	b.coldRows(&sec, "coldstart-docker", targets, modes)
	leftover := "none"
	if len(left) > 0 {
		leftover = strings.Join(left, ", ")
	}
	sec.rows = append(sec.rows, row{metric: "containers of the bench's pools left after gantry serve stopped (SIGTERM)", gantry: leftover, target: "none",
		verdict: b.verdict("coldstart-docker", len(left) == 0, fmt.Sprint(len(left)))})
	sec.notes = append(sec.notes, "Issue 5 says FLASHBOOT keeps stopped containers and restarts them: that is `suspend: stop`. The docker pool's default is `suspend: pause` "+
		"(the cgroup freezer: the worker keeps its memory and is thawed on resume); both are measured. With OFF every cold start creates and starts a fresh container, "+
		"which is removed when the worker retires. The engine's own processes (dockerd, containerd, its shims, runc) and the workers inside the containers are not children of the bench: "+
		"the machine-load note below counts them with the other processes.")
	b.sections = append(b.sections, sec)
	return nil
}

// dockerClient connects to the engine named by DOCKER_HOST (else the local socket) and pings it.
func dockerClient() (*client.Client, error) {
	api, err := client.New(client.FromEnv)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := api.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		_ = api.Close()
		return nil, err
	}
	return api, nil
}

// dockerInfo names the engine's storage driver.
func dockerInfo(api *client.Client) string {
	info, err := api.Info(context.Background(), client.InfoOptions{})
	if err != nil {
		return "unknown"
	}
	return info.Info.Driver
}

// echoImage builds the echo worker image from a static build of ./cmd/gantry with
// build/worker.Dockerfile, unless the engine has it already (the tag names the binary's
// hash), and returns its tag and how it came to be.
func (b *bench) echoImage(api *client.Client) (tag, how string, err error) {
	dir := filepath.Join(b.tmp, "image")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	bin := filepath.Join(dir, "gantry")
	logf("coldstart-docker: building a static %s", bin)
	cmd := exec.Command(b.o.goCmd, "build", "-trimpath", "-o", bin, "./cmd/gantry")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("building the static gantry for the image: %w\n%s", err, out)
	}
	binary, err := os.ReadFile(bin)
	if err != nil {
		return "", "", err
	}
	dockerfile, err := os.ReadFile(filepath.Join("build", "worker.Dockerfile"))
	if err != nil {
		return "", "", fmt.Errorf("reading the worker image's Dockerfile (run from the repository root): %w", err)
	}
	sum := sha256.Sum256(binary)
	tag = "gantry/echo:bench-" + hex.EncodeToString(sum[:6])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := api.ImageInspect(ctx, tag); err == nil {
		return tag, ", already on the engine from an earlier run with the same binary", nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", "", fmt.Errorf("looking for image %s: %w", tag, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		body []byte
	}{{"Dockerfile", 0o644, dockerfile}, {"gantry", 0o755, binary}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body))}); err != nil {
			return "", "", err
		}
		if _, err := tw.Write(f.body); err != nil {
			return "", "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", "", err
	}
	worker := "echo"
	began := time.Now()
	res, err := api.ImageBuild(ctx, &buf, client.ImageBuildOptions{Tags: []string{tag}, BuildArgs: map[string]*string{"WORKER": &worker},
		Remove: true, ForceRemove: true})
	if err != nil {
		return "", "", fmt.Errorf("building image %s: %w", tag, err)
	}
	defer func() { _ = res.Body.Close() }()
	dec := json.NewDecoder(res.Body)
	for {
		var msg struct{ Error string }
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", "", fmt.Errorf("building image %s: %w", tag, err)
		}
		if msg.Error != "" {
			return "", "", fmt.Errorf("building image %s: %s", tag, msg.Error)
		}
	}
	logf("coldstart-docker: built %s in %v", tag, time.Since(began).Round(time.Millisecond))
	return tag, fmt.Sprintf(", built by this run through the Engine API (%d MB)", len(binary)>>20), nil
}

// containersOf lists the containers with all the labels given, as "name:state".
func containersOf(api *client.Client, labels ...string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", labels...)})
	if err != nil {
		return []string{"(listing failed: " + err.Error() + ")"}
	}
	var out []string
	for _, c := range list.Items {
		out = append(out, strings.TrimPrefix(strings.Join(c.Names, ","), "/")+":"+string(c.State))
	}
	return out
}

// removeLeftovers removes the containers of the given pools (a server that was killed leaves
// them; a clean stop does not).
func removeLeftovers(api *client.Client, pools ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, p := range pools {
		list, err := api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", docker.LabelPool+"="+p)})
		if err != nil {
			continue
		}
		for _, c := range list.Items {
			logf("coldstart-docker: removing container %v, left behind", c.Names)
			_, _ = api.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
		}
	}
}

// waitContainersZero waits until /health shows no idle, running or initializing worker and
// nothing queued, and the engine agrees: no container of the endpoint, or (suspended) only
// containers in state and /health counting them suspended. It returns how long that took and
// the containers it saw.
func (g *gantry) waitContainersZero(api *client.Client, ep string, suspended bool, state string, timeout time.Duration) (time.Duration, string, error) {
	start := time.Now()
	var h health
	var cs []string
	var err error
	for time.Since(start) < timeout {
		h, err = g.health(http.DefaultClient, ep)
		if err == nil && h.Workers.Idle+h.Workers.Running+h.Workers.Initializing == 0 && h.Jobs.InQueue+h.Jobs.InProgress == 0 {
			cs = containersOf(api, docker.LabelEndpoint+"="+ep)
			inState := 0
			for _, c := range cs {
				if strings.HasSuffix(c, ":"+state) {
					inState++
				}
			}
			if !suspended && len(cs) == 0 {
				return time.Since(start), "none", nil
			}
			if suspended && len(cs) > 0 && inState == len(cs) && h.Workers.Suspended > 0 {
				return time.Since(start), strings.Join(cs, ","), nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, "", fmt.Errorf("not scaled to zero after %v: health %+v, containers %v (err %v)", timeout, h.Workers, cs, err)
}
