package process

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gantryhq/gantry/core"
)

// testdata/usage-*.csv answer UsageArgs.

func TestParseUsage(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("testdata", "usage-mixed.csv"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseUsage(string(b))
	if err != nil || len(got) != 3 || got[0].Utilization != 0.87 || got[0].MemoryUsedMB != 40960 ||
		got[2].Utilization != 0 || got[2].UUID != "GPU-f5a8c27d-1e69-4b30-9d2c-86e0b7f4a15d" {
		t.Errorf("ParseUsage(usage-mixed.csv) = %+v, %v; want 3 GPUs, 87%% and 40960 MiB on the first, [N/A] read as 0", got, err)
	}
	for _, bad := range []string{"0, x, 1, 2", "a, x, 1, 2, 3"} {
		if _, err := ParseUsage(bad); err == nil {
			t.Errorf("ParseUsage(%q) = nil error; want one", bad)
		}
	}
}

// countingSMI writes an nvidia-smi stand-in that prints the usage CSV and counts its runs in
// a file; it returns its path and the counter's.
func countingSMI(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	csv, err := filepath.Abs(filepath.Join("testdata", "usage-mixed.csv"))
	if err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(dir, "runs")
	script := "#!/bin/sh\necho run >> '" + runs + "'\n" +
		`[ "$1" = '` + UsageArgs[0] + `' ] && [ "$2" = '` + UsageArgs[1] + `' ] || exit 2` + "\n" +
		"cat '" + csv + "'\n"
	path := filepath.Join(dir, "nvidia-smi")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, runs
}

// A worker's GPU use is shown per GPU it holds, named as the pool names its devices, and
// scrapes within the interval reuse one nvidia-smi run. (This machine has no GPU: nvidia-smi
// is a stand-in printing a recorded answer.)
func TestGPUCollector(t *testing.T) {
	t.Parallel()
	smi, runs := countingSMI(t)
	f := setup(t, Config{Pool: core.PoolInfo{ID: "gpu", GPUType: "NVIDIA A100-SXM4-80GB", GPUs: 2, DataCenter: "LOCAL"},
		Devices: []string{"GPU-2d71f0e8-b593-a64c-7e08-d1f5c3a92b64", "GPU-9e3b6c1a-47d2-0f85-e1a6-3c7b29d04f58"}})
	spec := f.spec("test/serves")
	spec.GPUs = []int{1} // the machine's GPU 0, busy in the recorded answer
	f.start(spec)
	c := f.pool.Collector(&GPUSampler{Path: smi})
	want := `
# HELP gantry_worker_gpu_memory_used_bytes Memory in use on a worker's GPU (by every process on it), as nvidia-smi reports it; process pools, sampled at most every 10 s.
# TYPE gantry_worker_gpu_memory_used_bytes gauge
gantry_worker_gpu_memory_used_bytes{gpu="GPU-9e3b6c1a-47d2-0f85-e1a6-3c7b29d04f58",pool="gpu",worker="w1"} 4.294967296e+10
# HELP gantry_worker_gpu_utilization_ratio Share of nvidia-smi's last sample period in which a kernel ran on a worker's GPU (0 to 1); process pools, sampled at most every 10 s.
# TYPE gantry_worker_gpu_utilization_ratio gauge
gantry_worker_gpu_utilization_ratio{gpu="GPU-9e3b6c1a-47d2-0f85-e1a6-3c7b29d04f58",pool="gpu",worker="w1"} 0.87
`
	for range 3 {
		if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
			t.Error(err)
		}
	}
	if b, _ := os.ReadFile(runs); strings.Count(string(b), "run") != 1 {
		t.Errorf("nvidia-smi ran %d times for 3 scrapes within the interval; want 1", strings.Count(string(b), "run"))
	}
}

// Without nvidia-smi the metrics are absent; a pool of CPU slots has none.
func TestGPUCollectorAbsent(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	c := f.pool.Collector(&GPUSampler{Path: filepath.Join(t.TempDir(), "no-nvidia-smi")})
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("%d series without nvidia-smi; want 0", n)
	}
	if _, err := (&GPUSampler{Path: "/nonexistent/nvidia-smi"}).Sample(context.Background()); err == nil {
		t.Error("Sample with a missing nvidia-smi = nil error; want one")
	}
	if c := newPool(t, Config{Pool: cpuPool, Images: testImages}).Collector(&GPUSampler{}); c != nil {
		t.Errorf("Collector of a CPU pool = %v; want nil", c)
	}
}
