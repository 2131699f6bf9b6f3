package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testkit"
)

// TestForeignWorker runs a worker that is not Go — a stdlib Python script speaking the
// RunPod protocol — through the process pool's `images:` mapping, with the endpoint's env.
func TestForeignWorker(t *testing.T) {
	t.Parallel()
	python := workerPython(t)
	bin := buildGantry(t)
	// Next to the binary, where the workers' user (nobody, when the tests run as root) can
	// read it wherever the checkout is.
	src, err := os.ReadFile("testdata/pyworker.py")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(filepath.Dir(bin), "pyworker.py")
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "gantry.yaml")
	os.WriteFile(cfg, []byte("images:\n  example/py-worker:1: ["+python+", "+script+"]\n"), 0o600)
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

// workerPython returns a python3 the process pool's workers can run: under root, they run as
// nobody, who cannot reach one in root's home (pyenv's shims), so the first python3 everyone
// can run; the test is skipped when there is none.
func workerPython(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	if os.Geteuid() != 0 {
		return p
	}
	for _, c := range []string{p, "/usr/bin/python3", "/usr/local/bin/python3"} {
		if everyoneRuns(c) {
			return c
		}
	}
	t.Skip("no python3 that the workers' user nobody can run")
	return ""
}

// everyoneRuns reports whether any user may run the program at path: every directory on the
// way searchable, and the file executable, by others.
func everyoneRuns(path string) bool {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false
	}
	for p := real; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if p == filepath.Dir(p) {
			return true
		}
	}
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

// TestProcessWorkersIsolated runs gantry/http-echo through the process pool of the real binary:
// the worker listens on 127.0.0.1 only (HOST), not on every interface where anyone could reach
// it without a key, and, under a server running as root (CI), it does not run as root.
func TestProcessWorkersIsolated(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	data := t.TempDir()
	s := startServe(t, bin, "--data", data)
	key := newKey(t, bin, data)
	id, _, _ := lbEndpoint(t, s, key, `{"name":"web","type":"LOAD_BALANCER","templateId":"gantry-http-echo",
		"gpu":{"pools":["local"]},"workers":{"min":1,"max":1},"scaling":{"type":"REQUEST_COUNT","requestCount":1}}`)
	re := regexp.MustCompile(`msg="http-echo listening" addr=(\S+)`)
	var addr, log string
	testkit.EventuallyWithin(t, 30*time.Second, "the worker logs where it listens", func() bool {
		logs, _ := filepath.Glob(filepath.Join(data, "workers", id+"-*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			if m := re.FindStringSubmatch(string(b)); m != nil {
				addr, log = m[1], l
				return true
			}
		}
		return false
	})
	if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
		t.Errorf("gantry/http-echo on the process pool listens on %s; want 127.0.0.1 only", addr)
	}
	if os.Geteuid() == 0 {
		worker := strings.TrimSuffix(filepath.Base(log), ".log")
		if uid := processUID(t, bin, worker); uid == "0" || uid == "" {
			t.Errorf("worker %s runs as uid %q; want an unprivileged user", worker, uid)
		}
	}
	s.stop(t)
}

// processUID returns the real uid of the process running `bin worker ...` whose environment
// names worker (RUNPOD_POD_ID), "" when there is none.
func processUID(t *testing.T, bin, worker string) string {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, _ := os.ReadFile(filepath.Join(d, "cmdline"))
		env, _ := os.ReadFile(filepath.Join(d, "environ"))
		if !strings.HasPrefix(string(cmdline), bin+"\x00worker\x00") || !strings.Contains("\x00"+string(env), "\x00RUNPOD_POD_ID="+worker+"\x00") {
			continue
		}
		status, _ := os.ReadFile(filepath.Join(d, "status"))
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Uid:" {
				return f[1]
			}
		}
	}
	return ""
}
