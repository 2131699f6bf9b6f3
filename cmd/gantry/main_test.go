package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/server/servertest"
)

// built is the gantry binary the tests run, compiled once for the whole test binary: some
// twenty tests run it, and a build takes tens of seconds on a busy machine.
var built struct {
	once sync.Once
	bin  string
	err  error
}

// buildGantry returns the binary, compiling it on first use; TestMain removes it.
func buildGantry(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "gantry-test-bin-")
		if err == nil {
			// Run as root (as CI does), the server starts its workers as nobody, who must
			// reach the binary.
			err = os.Chmod(dir, 0o755)
		}
		if err != nil {
			built.err = err
			return
		}
		built.bin = filepath.Join(dir, "gantry")
		if out, err := exec.Command("go", "build", "-o", built.bin, ".").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// TestMain stops the PostgreSQL server the tests shared (pgtest), if one started, and removes
// the binary.
func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	if built.bin != "" {
		os.RemoveAll(filepath.Dir(built.bin))
	}
	os.Exit(code)
}

// started is a running `gantry serve`.
type started struct {
	cmd  *exec.Cmd
	base string
	done chan error
}

var listenRE = regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)

// startServe starts `gantry serve` on a port of the kernel's and waits for its address
// (startLogged, when the test reads the server's log too).
func startServe(t *testing.T, bin string, args ...string) *started {
	t.Helper()
	s, _ := startLogged(t, bin, args...)
	return s
}

// stop sends SIGTERM and expects a clean exit.
func (s *started) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("gantry serve exited with %v after SIGTERM; want 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("gantry serve did not exit within 30 s of SIGTERM")
	}
}

// send makes one request; see servertest.Do.
func send(t *testing.T, method, url, auth, body string) (int, http.Header, []byte) {
	t.Helper()
	return servertest.Do(t, method, url, auth, body)
}

// call sends a management request with a bearer key; see servertest.Call.
func call(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	return servertest.Call(t, method, url, key, body)
}

// TestServeEndToEnd runs the binary as a user would: serve, issue a key while it runs, create an
// endpoint, stop it with SIGTERM, start it again and find the endpoint.
func TestServeEndToEnd(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	data := t.TempDir()
	s := startServe(t, bin, "--data", data)

	if code, body := call(t, "GET", s.base+"/healthz", "", ""); code != 200 {
		t.Fatalf("/healthz = %d %s; want 200", code, body)
	}
	out, err := exec.Command(bin, "keys", "create", "--data", data, "--user", "alice").Output()
	if err != nil {
		t.Fatalf("keys create: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	key := lines[len(lines)-1]
	if !strings.HasPrefix(key, "gk_") {
		t.Fatalf("last line of keys create = %q; want the key", key)
	}
	keyFiles, _ := filepath.Glob(filepath.Join(data, "keys", "*.json"))
	for _, f := range keyFiles {
		if b, _ := os.ReadFile(f); bytes.Contains(b, []byte(key)) {
			t.Errorf("%s contains the key secret; only its hash may be stored", f)
		}
	}

	code, body := call(t, "POST", s.base+"/v2/serverless", key,
		`{"name":"echo","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["local"]},"scaling":{"type":"QUEUE_DELAY","queueDelay":4}}`)
	if code != 201 || !strings.Contains(body, `"run":"`+s.base+`/v2/`) {
		t.Fatalf("create = %d %s; want 201 with request URLs on %s", code, body, s.base)
	}
	id := regexp.MustCompile(`"id":"([a-z0-9]+)"`).FindStringSubmatch(body)[1]
	s.stop(t)

	s = startServe(t, bin, "--data", data, "--public-url", "https://gantry.example")
	code, body = call(t, "GET", s.base+"/v2/serverless/"+id, key, "")
	if code != 200 || !strings.Contains(body, `"run":"https://gantry.example/v2/`+id+`/run"`) {
		t.Fatalf("after restart: %d %s; want the endpoint with the new public URL", code, body)
	}
	s.stop(t)
}

func TestServeFlagsAndConfig(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	help, _ := exec.Command(bin, "serve", "--help").CombinedOutput()
	for _, want := range []string{"-listen", "-data", "-config", "-public-url", "-peer-url", "-quota-minute", "-quota-hour", "-quota-day", "Config file", "pools:"} {
		if !bytes.Contains(help, []byte(want)) {
			t.Errorf("serve --help lacks %q", want)
		}
	}

	cfg := filepath.Join(t.TempDir(), "gantry.yaml")
	os.WriteFile(cfg, []byte(`pools:
  - id: a100
    gpuType: NVIDIA A100 80GB PCIe
    count: 4
    cudaVersions: ["12.4"]
    dataCenterId: EU-RO-1
`), 0o600)
	data := t.TempDir()
	s := startServe(t, bin, "--data", data, "--config", cfg, "--quota-minute", "2")
	out, _ := exec.Command(bin, "keys", "create", "--data", data, "--user", "bob", "--scope", "read").Output()
	key := strings.TrimSpace(string(out)[strings.LastIndex(strings.TrimSpace(string(out)), "\n")+1:])
	code, body := call(t, "GET", s.base+"/v2/catalog/gpus?include=AVAILABILITY", key, "")
	if code != 200 || !strings.Contains(body, `"pool":"a100"`) || !strings.Contains(body, `"cudaVersions":["12.4"]`) {
		t.Errorf("catalog = %d %s; want the configured pool", code, body)
	}
	code, h, _ := send(t, "GET", s.base+"/v2/serverless", "Bearer "+key, "")
	if code != 200 || !strings.HasPrefix(h.Get("RateLimit-Policy"), `"minute";q=2;w=60, "hour";q=20000;w=3600`) {
		t.Errorf("second request = %d, RateLimit-Policy %q; want 200 with the flag's minute quota and the default hour quota", code, h.Get("RateLimit-Policy"))
	}
	if code, _ := call(t, "GET", s.base+"/v2/serverless", key, ""); code != 429 {
		t.Errorf("third request with quota 2/min = %d; want 429", code)
	}
	s.stop(t)

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("listen: 127.0.0.1:0\npoolz: []\n"), 0o600)
	if out, err := exec.Command(bin, "serve", "--config", bad).CombinedOutput(); err == nil || !strings.Contains(string(out), "poolz") {
		t.Errorf("unknown config key: err %v, output %s; want a refusal naming it", err, out)
	}
	os.WriteFile(bad, []byte("autoscaler: {stableWindow: 5, panicWindow: 10}\n"), 0o600)
	if out, err := exec.Command(bin, "serve", "--config", bad).CombinedOutput(); err == nil || !strings.Contains(string(out), "panicWindow 10 is longer") {
		t.Errorf("panic window over the stable one: err %v, output %s; want a refusal saying so", err, out)
	}
	if out, err := exec.Command(bin, "serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--peer-url", "10.0.0.5:8080").CombinedOutput(); err == nil || !strings.Contains(string(out), "peerUrl") {
		t.Errorf("--peer-url without a scheme: err %v, output %s; want a refusal naming peerUrl", err, out)
	}
	env := exec.Command(bin, "serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0")
	env.Env = append(os.Environ(), "GANTRY_PEER_URL=ftp://10.0.0.5")
	if out, err := env.CombinedOutput(); err == nil || !strings.Contains(string(out), "peerUrl") {
		t.Errorf("GANTRY_PEER_URL=ftp://10.0.0.5: err %v, output %s; want a refusal naming peerUrl", err, out)
	}
	for _, args := range [][]string{
		{"keys", "create", "--data", data},
		{"keys", "create", "--data", data, "--user", "x", "--scope", "admin"},
		{"keys", "create", "--data", data, "--user", "x", "--endpoint", "ep1"},
		{"keys", "create", "--data", data, "--user", "bad name"},
	} {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err == nil {
			t.Errorf("gantry %v succeeded (%s); want an error", args, out)
		}
	}
}

// TestKeysListAndRevoke: list shows ids and users but never secrets; a revoked key is refused
// by the running server once its cache entry lapses (10 s).
func TestKeysListAndRevoke(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	data := t.TempDir()
	s := startServe(t, bin, "--data", data)
	key := newKey(t, bin, data)
	if code, _ := call(t, "GET", s.base+"/v2/serverless", key, ""); code != 200 {
		t.Fatalf("with the new key: %d", code)
	}
	out, err := exec.Command(bin, "keys", "list", "--data", data).Output()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte(key)) || !bytes.Contains(out, []byte("alice")) || !bytes.Contains(out, []byte("ID")) {
		t.Fatalf("keys list =\n%s\nwant a table with the user and no secret", out)
	}
	id := strings.Fields(strings.Split(strings.TrimSpace(string(out)), "\n")[1])[0]
	if out, err := exec.Command(bin, "keys", "revoke", "--data", data, id).CombinedOutput(); err != nil {
		t.Fatalf("keys revoke: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "keys", "revoke", "--data", data, id).CombinedOutput(); err == nil {
		t.Errorf("revoking twice succeeded: %s", out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _ := call(t, "GET", s.base+"/v2/serverless", key, "")
		if code == 401 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a revoked key still answers %d after 20 s", code)
		}
		time.Sleep(250 * time.Millisecond)
	}
	s.stop(t)
}
