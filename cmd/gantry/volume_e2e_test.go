package main

// This file proves network volumes (issue 30) from outside, through `gantry serve` and its
// HTTP API, with real worker processes of a process pool run as root: each worker sees its
// endpoint's volume at /runpod-volume, and the data outlives workers, endpoint deletes and a
// restart of the server, until the volume itself is deleted.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/adapters/process"
)

// volumeWorkerPy is a worker in Python with the standard library only, speaking the RunPod
// worker protocol as testdata/pyworker.py does (job-take, job-done, the RUNPOD_WEBHOOK_*
// environment). The real `runpod` SDK would do the same, but cannot be installed here (no
// PyPI). Its handler reads /runpod-volume/<input.read> and returns it, and writes input.text
// to /runpod-volume/<input.write> when asked; a failure is the job's error.
const volumeWorkerPy = `import json, os, urllib.request

take = os.environ["RUNPOD_WEBHOOK_GET_JOB"]
done = os.environ["RUNPOD_WEBHOOK_POST_OUTPUT"]
token = os.environ["RUNPOD_AI_API_KEY"]
VOLUME = "/runpod-volume"


def call(url, body=None):
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    req.add_header("Authorization", token)
    if body is not None:
        req.add_header("Content-Type", "application/x-www-form-urlencoded")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.status, resp.read()


def handler(inp):
    out = {"uid": os.getuid(), "path": os.environ.get("GANTRY_VOLUME_PATH", "")}
    with open(os.path.join(VOLUME, inp["read"])) as f:
        out["read"] = f.read()
    if inp.get("write"):
        with open(os.path.join(VOLUME, inp["write"]), "w") as f:
            f.write(inp["text"])
    return out


while True:
    status, body = call(take + "&job_in_progress=0")
    if status != 200:
        continue
    job = json.loads(body)
    try:
        result = {"output": handler(job["input"])}
    except Exception as e:
        result = {"error": "%s: %s" % (type(e).__name__, e)}
    call(done.replace("$ID", job["id"]) + "&isStream=false", json.dumps(result).encode())
`

// TestVolumeEndToEnd runs the life of a network volume through `gantry serve` as root, with
// the process pool's workers in mount namespaces of their own (gantry __mountns): create the
// volume, pre-load a file into its directory on the host, run a job on an endpoint naming it
// whose worker reads that file and writes another, refuse to delete it while an endpoint names
// it, keep it across the endpoint's delete and a restart of the server, let a second
// endpoint's worker read what the first wrote, and delete it with its directory.
func TestVolumeEndToEnd(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skipf("the process pool mounts a worker's volume at /runpod-volume only as root (this test runs as uid %d); without root it passes $%s instead, which TestVolumeMountHelper's pool tests cover", os.Geteuid(), process.VolumeEnv)
	}
	python := workerPython(t)
	bin := buildGantry(t)
	// Next to the binary, where the workers' user (nobody) can read it.
	script := filepath.Join(filepath.Dir(bin), "volume-e2e-worker.py")
	if err := os.WriteFile(script, []byte(volumeWorkerPy), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "gantry.yaml")
	if err := os.WriteFile(cfg, []byte("images:\n  example/vol-worker:1: ["+python+", "+script+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	args := []string{"--data", data, "--config", cfg, "--quota-minute", "0", "--quota-hour", "0", "--quota-day", "0"}
	s, log := startLogged(t, bin, args...)
	key := newKey(t, bin, data)

	// 1. Create the volume in the local pool's data center.
	code, body := call(t, "POST", s.base+"/v2/network-volumes", key, `{"name":"weights","size":10,"dataCenter":"LOCAL"}`)
	if code != 201 {
		t.Fatalf("POST /v2/network-volumes = %d %s; want 201\nserver log:\n%s", code, body, log)
	}
	var vol struct {
		ID, Name, DataCenter string
		Size                 int
	}
	if err := json.Unmarshal([]byte(body), &vol); err != nil || vol.ID == "" {
		t.Fatalf("created volume %s: %v; want an id", body, err)
	}
	dir := filepath.Join(data, "volumes", vol.ID)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("the volume's directory %s after create: %v; want it made before the answer", dir, err)
	}

	// 2. Pre-load "weights" into it on the host, as the docs say.
	if err := os.WriteFile(filepath.Join(dir, "weights.txt"), []byte("llama weights v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// 3. An endpoint naming the volume; its worker reads the weights and writes out.txt.
	endpoint := func(s *started, name string) string {
		t.Helper()
		code, body := call(t, "POST", s.base+"/v2/serverless", key, `{"name":"`+name+`","type":"QUEUE","image":"example/vol-worker:1",
			"gpu":{"pools":["local"]},"networkVolumes":["`+vol.ID+`"],"flashboot":"OFF",
			"workers":{"min":0,"max":1,"idleTimeout":1},"scaling":{"type":"QUEUE_DELAY","queueDelay":4}}`)
		if code != 201 {
			t.Fatalf("create endpoint %s naming volume %s = %d %s; want 201", name, vol.ID, code, body)
		}
		var ep struct{ ID string }
		_ = json.Unmarshal([]byte(body), &ep)
		return ep.ID
	}
	type result struct {
		UID        int
		Path, Read string
	}
	runsync := func(s *started, ep, input string) result {
		t.Helper()
		code, j := jobCall(t, "POST", s.base+"/v2/"+ep+"/runsync", key, `{"input":`+input+`}`)
		var r result
		if err := json.Unmarshal(j.Output, &r); code != 200 || j.Status != "COMPLETED" || err != nil {
			logs, _ := filepath.Glob(filepath.Join(data, "workers", ep+"-*.log"))
			var wl strings.Builder
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				wl.WriteString(l + ":\n" + string(b) + "\n")
			}
			t.Fatalf("runsync %s on %s = %d %+v (output %s); want COMPLETED\nworker logs:\n%s\nserver log:\n%s", input, ep, code, j, j.Output, wl.String(), log)
		}
		if r.Path != "/runpod-volume" || r.UID == 0 {
			t.Errorf("the worker of %s ran as uid %d with GANTRY_VOLUME_PATH %q; want an unprivileged user and /runpod-volume", ep, r.UID, r.Path)
		}
		return r
	}
	// workersGone waits until the endpoint has no worker left (idleTimeout 1 s, FLASHBOOT off:
	// the worker's process exits).
	workersGone := func(s *started, ep string) {
		t.Helper()
		waitHealth(t, s.base+"/v2/"+ep+"/health", key, func(h healthView) bool {
			w := h.Workers
			return w.Idle+w.Running+w.Initializing+w.Unhealthy+w.Suspended+w.Throttled == 0
		})
	}
	ep1 := endpoint(s, "writer")
	r := runsync(s, ep1, `{"read":"weights.txt","write":"out.txt","text":"written by `+ep1+`\n"}`)
	if r.Read != "llama weights v1\n" {
		t.Errorf("the worker read %q from /runpod-volume/weights.txt; want the pre-loaded %q", r.Read, "llama weights v1\n")
	}
	workersGone(s, ep1)
	if b, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || string(b) != "written by "+ep1+"\n" {
		t.Errorf("out.txt on the host after the worker exited = %q, %v; want what the worker wrote", b, err)
	}

	// 4. The volume cannot be deleted while the endpoint names it.
	code, body = call(t, "DELETE", s.base+"/v2/network-volumes/"+vol.ID, key, "")
	if code != 409 || !strings.Contains(body, ep1) {
		t.Errorf("DELETE the volume while endpoint %s names it = %d %s; want 409 naming the endpoint", ep1, code, body)
	}
	if _, err := os.Stat(filepath.Join(dir, "weights.txt")); err != nil {
		t.Fatalf("a refused delete touched the volume's data: %v", err)
	}

	// 5. Deleting the endpoint keeps the data.
	if code, body := call(t, "DELETE", s.base+"/v2/serverless/"+ep1, key, ""); code != 200 && code != 204 {
		t.Fatalf("DELETE endpoint %s = %d %s", ep1, code, body)
	}
	for _, f := range []string{"weights.txt", "out.txt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("after the endpoint's delete, %s in the volume: %v; want it kept", f, err)
		}
	}

	// 6. Restart the server on the same data directory: the volume is still there, and a
	// second endpoint's worker reads what the first one wrote.
	s.stop(t)
	s, log = startLogged(t, bin, args...)
	code, body = call(t, "GET", s.base+"/v2/network-volumes", key, "")
	if code != 200 || !strings.Contains(body, `"id":"`+vol.ID+`"`) {
		t.Fatalf("GET /v2/network-volumes after the restart = %d %s; want volume %s listed", code, body, vol.ID)
	}
	ep2 := endpoint(s, "reader")
	if r := runsync(s, ep2, `{"read":"out.txt"}`); r.Read != "written by "+ep1+"\n" {
		t.Errorf("the second endpoint's worker read %q from /runpod-volume/out.txt; want %q", r.Read, "written by "+ep1+"\n")
	}

	// 7. Once no endpoint names it, the volume's delete removes it and its data.
	if code, body := call(t, "DELETE", s.base+"/v2/serverless/"+ep2, key, ""); code != 200 && code != 204 {
		t.Fatalf("DELETE endpoint %s = %d %s", ep2, code, body)
	}
	code, body = call(t, "DELETE", s.base+"/v2/network-volumes/"+vol.ID, key, "")
	if code != 204 {
		t.Fatalf("DELETE the volume no endpoint names = %d %s; want 204\nserver log:\n%s", code, body, log)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the volume's directory %s after its delete: %v; want it gone", dir, err)
	}
	if code, _ := call(t, "GET", s.base+"/v2/network-volumes/"+vol.ID, key, ""); code != 404 {
		t.Errorf("GET the deleted volume = %d; want 404", code)
	}
	s.stop(t)
}
