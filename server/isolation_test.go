package server_test

import (
	"encoding/json"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
)

// TestDataDirPrivate: an existing data directory left readable by others (0755, a 0644
// file-signing key) is made private when the server starts: 0700 directories, 0600 files.
func TestDataDirPrivate(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(data, "files"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"files.key", "files/old.png"} {
		if err := os.WriteFile(filepath.Join(data, f), []byte(strings.Repeat("k", 32)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{data, filepath.Join(data, "files")} {
		if err := os.Chmod(d, 0o755); err != nil { // whatever the umask made of it
			t.Fatal(err)
		}
	}
	servertest.New(t, server.Config{Data: data}, server.Options{})
	for path, want := range map[string]os.FileMode{
		data: 0o700, filepath.Join(data, "files"): 0o700, filepath.Join(data, "files.key"): 0o600,
		filepath.Join(data, "files", "old.png"): 0o600, filepath.Join(data, "keys"): 0o700,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
		} else if fi.Mode().Perm() != want {
			t.Errorf("%s is mode %v after the server started; want %v", path, fi.Mode().Perm(), want)
		}
	}
}

// TestProcessWorkersUnprivileged: a server running as root (as CI does) starts its process
// pool's workers as nobody, by default, not as root.
func TestProcessWorkersUnprivileged(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the default worker user applies to a server running as root")
	}
	want := "65534"
	if u, err := user.Lookup("nobody"); err == nil {
		want = u.Uid
	}
	// A stand-in for the gantry binary, where nobody can run it: its `worker echo` prints the uid.
	bin, err := os.MkdirTemp("", "gantry-server-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	self := filepath.Join(bin, "gantry")
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(self, []byte("#!/bin/sh\necho \"uid=$(id -u)\"\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	cfg := server.Config{Data: data, Pools: []server.PoolConfig{{PoolInfo: core.PoolInfo{ID: "local", GPUType: "CPU", GPUs: 2, CPU: true}}}}
	s := servertest.New(t, cfg, server.Options{Self: self, Builtins: []string{"echo", "image", "video", "speech", "text"}})
	key := servertest.Key(t, s, "alice", core.ScopeAll)
	code, body := servertest.Call(t, "POST", s.URL()+"/v2/serverless", key,
		`{"name":"id","type":"QUEUE","image":"gantry/echo","gpu":{"pools":["local"]},"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"min":1,"max":1}}`)
	if code != 201 {
		t.Fatalf("create = %d %s", code, body)
	}
	var ep struct{ ID string }
	_ = json.Unmarshal([]byte(body), &ep)
	var got string
	testkit.EventuallyWithin(t, 30*time.Second, "the worker prints its uid to its log", func() bool {
		logs, _ := filepath.Glob(filepath.Join(data, "workers", ep.ID+"-*.log"))
		for _, l := range logs {
			if b, err := os.ReadFile(l); err == nil && strings.HasPrefix(string(b), "uid=") {
				got = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
				return true
			}
		}
		return false
	})
	if got != "uid="+want {
		t.Errorf("the process pool's worker runs as %s; want uid=%s (nobody), not root", got, want)
	}
}
