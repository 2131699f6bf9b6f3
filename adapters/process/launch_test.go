package process

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/scheduler"
)

func TestLauncherCommand(t *testing.T) {
	t.Parallel()
	l := &Launcher{Self: "/bin/gantry", Builtins: []string{"echo"}, Images: map[string][]string{"my/img:1": {"python3", "h.py"}}}
	for _, tc := range []struct {
		image string
		want  string
		err   string
	}{
		{"gantry/echo", "/bin/gantry worker echo", ""},
		{"my/img:1", "python3 h.py", ""},
		{"gantry/nope", "", `no command for image "gantry/nope"`},
		{"other:2", "", "known: gantry/echo, my/img:1"},
	} {
		argv, err := l.command(tc.image)
		if got := strings.Join(argv, " "); got != tc.want || (tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err))) {
			t.Errorf("command(%q) = %q, %v; want %q, error containing %q", tc.image, got, err, tc.want, tc.err)
		}
	}
}

func TestLauncherBuiltinsGetOneThread(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	// A stand-in for this binary: prints GOMAXPROCS as `gantry worker echo` would see it.
	self := filepath.Join(t.TempDir(), "gantry")
	if err := os.WriteFile(self, []byte("#!/bin/sh\necho $GOMAXPROCS\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	l := &Launcher{Self: self, Builtins: []string{"echo"}, LogDir: logs}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{{nil, "1"}, {map[string]string{"GOMAXPROCS": "4"}, "4"}} {
		w, err := l.Launch(scheduler.WorkerSpec{ID: "w" + tc.want, Image: "gantry/echo", Env: tc.env})
		if err != nil {
			t.Fatal(err)
		}
		_ = w.Wait()
		b, _ := os.ReadFile(filepath.Join(logs, "w"+tc.want+".log"))
		if got := strings.TrimSpace(string(b)); got != tc.want {
			t.Errorf("GOMAXPROCS with env %v = %q; want %q", tc.env, got, tc.want)
		}
	}
}

func TestLauncherRunsAndStops(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	l := &Launcher{LogDir: logs, StopGrace: 200 * time.Millisecond, Images: map[string][]string{
		"env":   {"sh", "-c", `echo "greeting=$GREETING args=$*"; exit 3`, "sh"},
		"sleep": {"sh", "-c", `trap '' TERM; echo ready; sleep 60`},
	}}
	w, err := l.Launch(scheduler.WorkerSpec{ID: "w1", Image: "env", Args: "a b", Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("Wait = %v; want exit status 3", err)
	}
	b, _ := os.ReadFile(filepath.Join(logs, "w1.log"))
	if got := strings.TrimSpace(string(b)); got != "greeting=hi args=a b" {
		t.Errorf("worker log = %q; want the env and args", got)
	}
	// A worker that ignores SIGTERM is killed after the grace period.
	w, err = l.Launch(scheduler.WorkerSpec{ID: "w2", Image: "sleep"})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; { // until its trap is set
		if b, _ := os.ReadFile(filepath.Join(logs, "w2.log")); strings.Contains(string(b), "ready") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker never got ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	w.Stop()
	done := make(chan error, 1)
	go func() { done <- w.Wait() }()
	select {
	case <-done:
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Errorf("stopped after %v; want SIGKILL only after the 200 ms grace", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a worker ignoring SIGTERM was not killed")
	}
	if _, err := l.Launch(scheduler.WorkerSpec{ID: "w3", Image: "missing"}); err == nil {
		t.Error("Launch of an unmapped image succeeded")
	}
}
