package console_test

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chromiumPath is Debian's Chromium, which e2e/console.mjs drives; CHROMIUM overrides it.
func chromiumPath() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// need skips the test when a tool is missing, or fails it when GANTRY_REQUIRE_CHROMIUM=1 (CI).
func need(t *testing.T, what, path string) {
	t.Helper()
	if _, err := exec.LookPath(path); err == nil {
		return
	}
	msg := what + " is not installed (apt-get install -y chromium nodejs npm)"
	if os.Getenv("GANTRY_REQUIRE_CHROMIUM") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg + "; GANTRY_REQUIRE_CHROMIUM=1 makes this a failure")
}

// artifacts is where the screenshots go: $GANTRY_ARTIFACTS/console, else e2e/artifacts.
func artifacts(t *testing.T) string {
	dir := filepath.Join("e2e", "artifacts")
	if a := os.Getenv("GANTRY_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "console")
	}
	dir, _ = filepath.Abs(dir)
	if err := os.RemoveAll(dir); err != nil { // no screenshot of an earlier run stays
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

var listening = regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)

// serve builds gantry, issues a key and starts `gantry serve` on 127.0.0.1 with its process
// pool (CPU slots here), whose workers are the binary's own `gantry worker echo`. It returns
// the base URL, alice's key and bob's (so alice's key list holds only the keys she makes); the
// server is stopped when the test ends.
func serve(t *testing.T) (base, key, key2 string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "gantry")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/gantry").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	out, err := exec.Command(bin, "keys", "create", "--init", "--data", data, "--user", "alice").Output()
	if err != nil {
		t.Fatalf("keys create: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	key = lines[len(lines)-1]
	out, err = exec.Command(bin, "keys", "create", "--data", data, "--user", "bob").Output()
	if err != nil {
		t.Fatalf("keys create (the second): %v", err)
	}
	lines = strings.Split(strings.TrimSpace(string(out)), "\n")
	key2 = lines[len(lines)-1]

	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data", data)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("gantry serve's log:\n%s", b)
		}
	})
	deadline := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	defer deadline.Stop()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if m := listening.FindStringSubmatch(sc.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return m[1], key, key2
		}
	}
	t.Fatal("gantry serve printed no address")
	return "", "", ""
}

// TestConsoleInChromium drives the console in a real headless Chromium (e2e/console.mjs):
// sign in, create an endpoint from the gantry-echo template, send a job from the playground
// and see it complete with its stream and output, find it in the jobs list and open it; stream
// a job from an API client while its job page is open and get every part (the console reads
// with peek and takes nothing); follow a job's badge and progress; see a failed job's error and
// retry it, Cancel and Retry enabled as the job's state allows; see the open job list refresh;
// read the API tab's URLs and copy a snippet; see the worker (its GPUs named, its jobs column
// saying what it counts) and its log lines, see a chart drawn from real metrics, read the model
// prices and run one (output and cost), and create a key, revoke the one signed in with and be
// signed out, find the key made with it refused too, and sign in as another user. For load
// balancing: create a LOAD_BALANCER endpoint with the form (the template sets type and scaling;
// a 422 shows its one error once), see its Type in the list, send requests from its request
// tester, find them in /metrics and its charts, save its scaling and FlashBoot, and see its
// worker exit with why. Create a network volume, grow it, see a shrink refused and delete it
// (or, when no pool keeps volumes, see why). The sign-in page says how to get a key; at 390 px
// no table is clipped.
// Every step leaves a screenshot in the artifacts directory; a failing step leaves
// failure-<step>.png.
func TestConsoleInChromium(t *testing.T) {
	need(t, "Chromium", chromiumPath())
	need(t, "Node.js", "node")
	need(t, "npm", "npm")
	install := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--silent")
	install.Dir = "e2e"
	install.Env = append(os.Environ(), "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	base, key, key2 := serve(t)
	out := artifacts(t)
	node := exec.Command("node", "console.mjs")
	node.Dir = "e2e"
	node.Env = append(os.Environ(), "BASE="+base, "KEY="+key, "KEY2="+key2, "OUT="+out, "CHROMIUM="+chromiumPath())
	var stderr strings.Builder
	node.Stderr = &stderr
	stdout, err := node.Output()
	steps := 0
	for _, line := range strings.Split(strings.TrimSpace(string(stdout)), "\n") {
		var s struct {
			Step, Error string
			OK          bool
		}
		if json.Unmarshal([]byte(line), &s) != nil {
			t.Logf("console.mjs: %s", line)
			continue
		}
		steps++
		switch {
		case s.Error != "":
			t.Errorf("step %s: %s", s.Step, s.Error)
		case s.OK:
			t.Logf("step %s: ok", s.Step)
		}
	}
	if err != nil || steps < 16 {
		t.Errorf("node console.mjs: %v (%d steps reported)\n%s", err, steps, stderr.String())
	}
	t.Logf("screenshots in %s", out)
}

// TestMetricsJS runs the unit tests of static/metrics.js (e2e/metrics.test.mjs) under Node's
// test runner: the console keeps the shown endpoint's series alone, not every endpoint's.
func TestMetricsJS(t *testing.T) {
	t.Parallel()
	need(t, "Node.js", "node")
	cmd := exec.Command("node", "--test", "metrics.test.mjs")
	cmd.Dir = "e2e"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("node --test metrics.test.mjs: %v\n%s", err, out)
	}
}
