package process

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// needRoot skips a test that switches users unless it runs as root (CI does).
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("switching a worker's user needs root")
	}
}

// sharedDir returns a directory every user may search, removed after the test (t.TempDir's
// parent is private to the user running the test).
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gantry-process-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPoolWorkerUser: with User, a worker runs as that user, its group and its home, not as the
// server's root; built-in workers too.
func TestPoolWorkerUser(t *testing.T) {
	t.Parallel()
	needRoot(t)
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody here")
	}
	logs := t.TempDir() // the server's own: the pool opens each log for its worker
	f := setup(t, Config{User: "nobody", LogDir: logs})
	spec := f.spec("test/whoami")
	f.start(spec)
	if e := f.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout); e.Err != nil {
		t.Fatalf("worker exited with %v", e.Err)
	}
	b, err := os.ReadFile(filepath.Join(logs, spec.ID+".log"))
	want := fmt.Sprintf("uid=%s gid=%s home=%s", nobody.Uid, nobody.Gid, nobody.HomeDir)
	if got := strings.TrimSpace(string(b)); err != nil || got != want {
		t.Errorf("worker of a pool with User nobody printed %q, %v; want %q", got, err, want)
	}

	// A built-in worker: this binary's stand-in, where nobody can run it.
	self := filepath.Join(sharedDir(t), "gantry")
	if err := os.WriteFile(self, []byte("#!/bin/sh\necho \"$* uid=$(id -u)\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	logs = t.TempDir()
	f = setup(t, Config{User: nobody.Uid, Self: self, Builtins: []string{"echo"}, LogDir: logs})
	spec = f.spec("gantry/echo")
	f.start(spec)
	if e := f.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout); e.Err != nil {
		t.Fatalf("built-in worker exited with %v", e.Err)
	}
	b, err = os.ReadFile(filepath.Join(logs, spec.ID+".log"))
	if got, want := strings.TrimSpace(string(b)), "worker echo uid="+nobody.Uid; err != nil || got != want {
		t.Errorf("built-in worker as uid %s printed %q, %v; want %q", nobody.Uid, got, err, want)
	}
}

// TestPoolUserChecks: root is refused as the workers' user, an unknown user is named, and a
// built-in worker binary the user cannot reach is refused when the pool is made, not at each
// start.
func TestPoolUserChecks(t *testing.T) {
	t.Parallel()
	base := Config{Pool: core.PoolInfo{ID: "p", GPUType: "CPU", GPUs: 1, CPU: true}}
	for _, tc := range []struct{ user, want string }{
		{"root", `user "root" is root`},
		{"0", `user "0" is root`},
		{"0:0", `user "0:0" is root`},
		{"gantry-no-such-user", `user "gantry-no-such-user"`},
		{"65534:x", `want a user name, a uid or uid:gid`},
	} {
		cfg := base
		cfg.User = tc.user
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with User %q = %v; want an error containing %q", tc.user, err, tc.want)
		}
	}
	if os.Geteuid() != 0 {
		cfg := base
		cfg.User = strconv.Itoa(os.Geteuid() + 1)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "only a server running as root") {
			t.Errorf("New with another user, not as root = %v; want a refusal", err)
		}
		return
	}
	private := filepath.Join(t.TempDir(), "gantry") // under a directory only root may search
	if err := os.WriteFile(private, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := base
	cfg.User, cfg.Self, cfg.Builtins = "65534:65534", private, []string{"echo"}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "(uid 65534) cannot run "+private) {
		t.Errorf("New with Self out of the user's reach = %v; want a refusal naming it", err)
	}
	cfg.Self = filepath.Join(sharedDir(t), "gantry")
	if err := os.WriteFile(cfg.Self, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "-rwx------") {
		t.Errorf("New with Self not executable by the user = %v; want a refusal naming its mode", err)
	}
	os.Chmod(cfg.Self, 0o755)
	if _, err := New(cfg); err != nil {
		t.Errorf("New with Self the user can run = %v", err)
	}
}

// TestPoolHostEnv: a worker that serves HTTP is told to listen on the loopback address (HOST),
// which the endpoint's env cannot change.
func TestPoolHostEnv(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{Pool: cpuPool})
	spec := f.spec("test/serves")
	spec.PortEnv = map[string]int{"PORT": 80}
	spec.Env["HOST"], spec.Env["PORT"] = "0.0.0.0", "80"
	f.start(spec)
	env := parseEnv(f.probe(spec))
	if env["HOST"] != "127.0.0.1" || env["PORT"] == "80" || env["PORT"] == "" {
		t.Errorf("worker serving HTTP sees HOST=%q PORT=%q; want HOST=127.0.0.1 and a free port", env["HOST"], env["PORT"])
	}
	queue := f.spec("test/serves") // no ports: no HOST either
	f.start(queue)
	if env := parseEnv(f.probe(queue)); env["HOST"] != "" {
		t.Errorf("queue worker sees HOST=%q; want none", env["HOST"])
	}
}

// TestPoolRefusesEnv: an endpoint stored before the env rule, with LD_PRELOAD, starts no
// worker.
func TestPoolRefusesEnv(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{Pool: cpuPool})
	spec := f.spec("test/serves")
	spec.Env["LD_PRELOAD"] = "/tmp/x.so"
	err := f.pool.Start(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "LD_PRELOAD") {
		t.Fatalf("Start with LD_PRELOAD in the env = %v; want a refusal naming it", err)
	}
	if _, live := f.pool.live.Get(spec.ID); live {
		t.Error("the refused worker is still held")
	}
}

// TestPoolRunsThisBinaryOutOfReach: when Self is the running binary in a directory the workers'
// user cannot search (`go run`, a binary in /root/go/bin; here the test binary in Go's private
// build directory), built-in workers still start, as that user, through /proc/self/exe.
func TestPoolRunsThisBinaryOutOfReach(t *testing.T) {
	t.Parallel()
	needRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	u, err := lookupUser("65534:65534")
	if err != nil {
		t.Fatal(err)
	}
	if u.canRun(self) == nil {
		t.Skipf("the test binary %s is within everyone's reach: nothing to show", self)
	}
	logs := t.TempDir()
	f := setup(t, Config{User: "65534:65534", Self: self, Builtins: []string{"echo"}, LogDir: logs})
	if f.pool.cmds.selfExec != thisBinary {
		t.Fatalf("built-in workers execute %q; want %s", f.pool.cmds.selfExec, thisBinary)
	}
	spec := f.spec("gantry/echo")
	f.start(spec)
	if e := f.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout); e.Err != nil {
		t.Fatalf("built-in worker exited with %v", e.Err)
	}
	b, err := os.ReadFile(filepath.Join(logs, spec.ID+".log"))
	if got, want := strings.TrimSpace(string(b)), "worker echo uid=65534"; err != nil || got != want {
		t.Errorf("built-in worker printed %q, %v; want %q", got, err, want)
	}
}
