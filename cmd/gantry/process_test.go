package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestForeignWorker runs a worker that is not Go — a stdlib Python script speaking the
// RunPod protocol — through the process pool's `images:` mapping, with the endpoint's env.
func TestForeignWorker(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	bin := buildGantry(t)
	script, _ := filepath.Abs("testdata/pyworker.py")
	cfg := filepath.Join(t.TempDir(), "gantry.yaml")
	os.WriteFile(cfg, []byte("images:\n  example/py-worker:1: [python3, "+script+"]\n"), 0o600)
	data := t.TempDir()
	s := startServe(t, bin, "--data", data, "--config", cfg)
	key := newKey(t, bin, data)
	code, body := call(t, "POST", s.base+"/v2/serverless", key,
		`{"name":"py","type":"QUEUE","image":"example/py-worker:1","env":{"GREETING":"hi"},"gpu":{"pools":["local"]},"scaling":{"type":"QUEUE_DELAY","queueDelay":4}}`)
	if code != 201 {
		t.Fatalf("create = %d %s", code, body)
	}
	var ep struct{ ID string }
	_ = json.Unmarshal([]byte(body), &ep)
	code, j := jobCall(t, "POST", s.base+"/v2/"+ep.ID+"/runsync", key, `{"input":{"n":5}}`)
	var out any
	_ = json.Unmarshal(j.Output, &out)
	if b, _ := json.Marshal(out); code != 200 || j.Status != "COMPLETED" || string(b) != `{"greeting":"hi","py":{"n":5}}` {
		t.Fatalf("runsync through the Python worker = %d %+v %s", code, j, j.Output)
	}
	logs, _ := filepath.Glob(filepath.Join(data, "workers", ep.ID+"-*.log"))
	if len(logs) != 1 {
		t.Errorf("worker logs %v; want one file for the worker", logs)
	}
	s.stop(t)
}

func newKey(t *testing.T, bin, data string) string {
	t.Helper()
	out, err := execOutput(bin, "keys", "create", "--data", data, "--init", "--user", "alice")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

func execOutput(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).Output()
	return string(out), err
}
