package conformance

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunpodSDK drives Gantry with RunPod's npm client (js/package.json pins runpod-sdk): run,
// runsync, status, stream, cancel, purge-queue and health behave as against the hosted service.
func TestRunpodSDK(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("npm"); err != nil {
		if os.Getenv("GANTRY_REQUIRE_DOCKER") == "1" {
			t.Fatal("npm is not installed (apt-get install -y nodejs npm)")
		}
		t.Skip("npm is not installed")
	}
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "sdk.mjs"} {
		b, err := os.ReadFile(filepath.Join("js", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	install := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--silent")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	ep := create(t, echoEndpoint("conformance-sdk", `,"workers":{"min":0,"max":1,"idleTimeout":30}`))["id"].(string)
	node := exec.Command("node", "sdk.mjs")
	node.Dir = dir
	node.Env = append(os.Environ(), "BASE="+gantry.base, "KEY="+gantry.key, "EP="+ep)
	var stderr bytes.Buffer
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		t.Fatalf("node sdk.mjs: %v\n%s\n%s", err, out, stderr.String())
	}
	steps := map[string]json.RawMessage{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Step  string          `json:"step"`
			Value json.RawMessage `json:"value"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil {
			steps[line.Step] = line.Value
		}
	}
	var runSync struct {
		Status string          `json:"status"`
		Output json.RawMessage `json:"output"`
	}
	_ = json.Unmarshal(steps["runSync"], &runSync)
	if runSync.Status != "COMPLETED" || string(runSync.Output) != `"hello from runpod-sdk"` {
		t.Errorf("runSync = %s", steps["runSync"])
	}
	for step, want := range map[string]string{
		"runThenStatus":   `"output":{"n":7}`,
		"stream":          `[{"output":"a"},{"output":"b"},{"output":"c"}]`,
		"purgeQueue":      `"removed":5`,
		"cancel":          `"status":"CANCELLED"`,
		"cancelledStatus": `"status":"CANCELLED"`,
		"health":          `"jobs":{`,
	} {
		if got := string(steps[step]); !strings.Contains(got, want) {
			t.Errorf("%s = %s; want it to contain %s (all output:\n%s)", step, got, want, out)
		}
	}
}
