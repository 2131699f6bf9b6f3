package process_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/adapters/process"
	"github.com/gantryhq/gantry/core"
)

// The files in testdata/ are nvidia-smi outputs: query-*.csv answer process.QueryArgs,
// banner-*.txt are plain `nvidia-smi`.

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const h100 = "NVIDIA H100 80GB HBM3"

func TestParseGPUsH100x8(t *testing.T) {
	t.Parallel()
	gpus, err := process.ParseGPUs(readTestdata(t, "query-h100x8.csv"))
	if err != nil {
		t.Fatalf("ParseGPUs(query-h100x8.csv) err = %v; want nil", err)
	}
	if len(gpus) != 8 {
		t.Fatalf("ParseGPUs(query-h100x8.csv) = %d GPUs; want 8", len(gpus))
	}
	uuids := map[string]bool{}
	for i, g := range gpus {
		if g.Index != i || g.Name != h100 || g.MemoryMB != 81559 || !strings.HasPrefix(g.UUID, "GPU-") || len(g.UUID) != 40 {
			t.Errorf("ParseGPUs(query-h100x8.csv)[%d] = %+v; want {Index:%d Name:%s MemoryMB:81559 UUID:GPU-<36 chars>}", i, g, i, h100)
		}
		uuids[g.UUID] = true
	}
	if len(uuids) != 8 {
		t.Errorf("ParseGPUs(query-h100x8.csv) has %d distinct UUIDs; want 8", len(uuids))
	}
}

func TestParseGPUsMixed(t *testing.T) {
	t.Parallel()
	want := []process.GPU{
		{Index: 0, Name: "NVIDIA A100-SXM4-80GB", MemoryMB: 81920, UUID: "GPU-9e3b6c1a-47d2-0f85-e1a6-3c7b29d04f58"},
		{Index: 1, Name: "NVIDIA A100-SXM4-80GB", MemoryMB: 81920, UUID: "GPU-2d71f0e8-b593-a64c-7e08-d1f5c3a92b64"},
		{Index: 2, Name: "NVIDIA L4", MemoryMB: 23034, UUID: "GPU-f5a8c27d-1e69-4b30-9d2c-86e0b7f4a15d"},
	}
	got, err := process.ParseGPUs(readTestdata(t, "query-mixed.csv"))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ParseGPUs(query-mixed.csv) = %+v, %v; want %+v, nil", got, err, want)
	}
}

func TestParseGPUsLayout(t *testing.T) {
	t.Parallel()
	one := []process.GPU{{Index: 3, Name: "NVIDIA L4", MemoryMB: 23034, UUID: "GPU-1"}}
	tests := []struct {
		in   string
		want []process.GPU
	}{
		{"", nil},
		{"\n\n", nil},
		{"3, NVIDIA L4, 23034, GPU-1", one},            // no final newline
		{"3, NVIDIA L4, 23034, GPU-1\r\n", one},        // CRLF
		{"\n  3 ,NVIDIA L4 ,  23034,GPU-1  \n\n", one}, // odd spacing and blank lines
		{"3,NVIDIA L4,23034,GPU-1\n", one},             // no spaces
	}
	for _, tt := range tests {
		got, err := process.ParseGPUs(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseGPUs(%q) = %+v, %v; want %+v, nil", tt.in, got, err, tt.want)
		}
	}
}

func TestParseGPUsMalformed(t *testing.T) {
	t.Parallel()
	good := "0, NVIDIA H100 80GB HBM3, 81559, GPU-5c1f3b0e-8a52-1d7c-64a9-2f0e7b3c91d4\n"
	tests := []string{
		"0, NVIDIA H100 80GB HBM3, 81559",                       // a field short
		"0, NVIDIA H100 80GB HBM3, 81559, GPU-1, extra",         // a field over
		"zero, NVIDIA H100 80GB HBM3, 81559, GPU-1",             // index not a number
		"0, NVIDIA H100 80GB HBM3, [N/A], GPU-1",                // memory not a number
		"0, NVIDIA H100 80GB HBM3, 81559 MiB, GPU-1",            // units left in
		"index, name, memory.total [MiB], uuid",                 // a header line
		"No devices were found",                                 // nvidia-smi's message
		good + "1, NVIDIA H100 80GB HBM3, 81559",                // a bad line after a good one
		good + "Unable to determine the device handle for GPU1", // a failing GPU
	}
	for _, in := range tests {
		if got, err := process.ParseGPUs(in); err == nil || got != nil {
			t.Errorf("ParseGPUs(%q) = %+v, %v; want nil, an error", in, got, err)
		}
	}
}

func TestParseDriverCUDA(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{readTestdata(t, "banner-550.txt"), "12.4"},
		{readTestdata(t, "banner-570.txt"), "12.8"},
		{readTestdata(t, "banner-no-driver.txt"), ""},
		{"", ""},
		{"| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0   |", "13.0"},
		{"CUDA Version:12.2", "12.2"},
		{"CUDA Version: N/A", ""},
		{"Driver Version: 550.54.15", ""},
	}
	for _, tt := range tests {
		if got := process.ParseDriverCUDA(tt.in); got != tt.want {
			name := tt.in
			if len(name) > 60 {
				name = name[:60] + "..."
			}
			t.Errorf("ParseDriverCUDA(%q) = %q; want %q", name, got, tt.want)
		}
	}
}

func TestCUDAVersions(t *testing.T) {
	t.Parallel()
	cuda11 := []string{"11.0", "11.1", "11.2", "11.3", "11.4", "11.5", "11.6", "11.7", "11.8"}
	cuda12 := []string{"12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.7", "12.8", "12.9"}
	tests := []struct {
		driver string
		want   []string
	}{
		{"12.4", append(slices.Clone(cuda11), cuda12[:5]...)},
		{"12.8", append(slices.Clone(cuda11), cuda12[:9]...)},
		{"12.0", append(slices.Clone(cuda11), "12.0")},
		{"11.8", cuda11},
		{"11.2", cuda11[:3]},
		{"13.0", append(append(slices.Clone(cuda11), cuda12...), "13.0")},
		{"", nil},
		{"garbage", nil},
		{"12", nil},
		{"12.", nil},
		{".4", nil},
		{"12.x", nil},
		{"v12.4", nil},
		{"12.4.1", nil},
	}
	for _, tt := range tests {
		if got := process.CUDAVersions(tt.driver); !slices.Equal(got, tt.want) {
			t.Errorf("CUDAVersions(%q) = %v; want %v", tt.driver, got, tt.want)
		}
	}
	// The brief's spot checks, stated directly.
	got := process.CUDAVersions("12.4")
	for _, v := range []string{"11.8", "12.4"} {
		if !slices.Contains(got, v) {
			t.Errorf("CUDAVersions(%q) = %v; want it to contain %s", "12.4", got, v)
		}
	}
	if slices.Contains(got, "12.5") {
		t.Errorf("CUDAVersions(%q) = %v; want no 12.5", "12.4", got)
	}
}

func inventory(t *testing.T, query, banner string) process.Inventory {
	t.Helper()
	gpus, err := process.ParseGPUs(readTestdata(t, query))
	if err != nil {
		t.Fatalf("ParseGPUs(%s) err = %v; want nil", query, err)
	}
	return process.Inventory{GPUs: gpus, DriverCUDA: process.ParseDriverCUDA(readTestdata(t, banner))}
}

func TestLocalPoolsSingleType(t *testing.T) {
	t.Parallel()
	want := []core.PoolInfo{{
		ID: "local", Adapter: "process", GPUType: h100, DisplayName: h100,
		MemoryGB: 80, GPUs: 8, CUDAVersions: process.CUDAVersions("12.4"), DataCenter: "LOCAL",
	}}
	got := process.LocalPools(inventory(t, "query-h100x8.csv", "banner-550.txt"))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("LocalPools(8x H100, CUDA 12.4) = %+v; want %+v", got, want)
	}
	if n := got[0].GPUsPerWorkerMax(); n != 8 {
		t.Errorf("LocalPools(8x H100)[0].GPUsPerWorkerMax() = %d; want 8", n)
	}
}

func TestLocalPoolsMixed(t *testing.T) {
	t.Parallel()
	cuda := process.CUDAVersions("12.8")
	a100 := core.PoolInfo{
		ID: "local", Adapter: "process", GPUType: "NVIDIA A100-SXM4-80GB", DisplayName: "NVIDIA A100-SXM4-80GB",
		MemoryGB: 80, GPUs: 2, CUDAVersions: cuda, DataCenter: "LOCAL",
	}
	l4 := core.PoolInfo{
		ID: "local-2", Adapter: "process", GPUType: "NVIDIA L4", DisplayName: "NVIDIA L4",
		MemoryGB: 22, GPUs: 1, CUDAVersions: cuda, DataCenter: "LOCAL", // 23034 MiB is 22.5 GiB
	}
	inv := inventory(t, "query-mixed.csv", "banner-570.txt")
	if got, want := process.LocalPools(inv), []core.PoolInfo{a100, l4}; !reflect.DeepEqual(got, want) {
		t.Errorf("LocalPools(2x A100 + L4, CUDA 12.8) = %+v; want %+v", got, want)
	}

	// Grouping is by type, not by position: an L4 between the A100s still makes two pools.
	inv.GPUs = []process.GPU{inv.GPUs[0], inv.GPUs[2], inv.GPUs[1]}
	if got, want := process.LocalPools(inv), []core.PoolInfo{a100, l4}; !reflect.DeepEqual(got, want) {
		t.Errorf("LocalPools(A100, L4, A100) = %+v; want %+v", got, want)
	}
	// The L4 pool's device 0 is the machine's second GPU here, and the A100 pool's device 1
	// its third: workers get their UUIDs.
	got := process.LocalDevices(inv)
	want := map[string][]string{"local": {inv.GPUs[0].UUID, inv.GPUs[2].UUID}, "local-2": {inv.GPUs[1].UUID}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("LocalDevices(A100, L4, A100) = %v; want %v", got, want)
	}
}

func TestLocalPoolsThreeTypes(t *testing.T) {
	t.Parallel()
	inv := process.Inventory{GPUs: []process.GPU{
		{Index: 0, Name: "A", MemoryMB: 1024}, {Index: 1, Name: "B", MemoryMB: 2048},
		{Index: 2, Name: "C", MemoryMB: 4096}, {Index: 3, Name: "B", MemoryMB: 2048},
	}}
	var got []string
	for _, p := range process.LocalPools(inv) {
		got = append(got, p.ID+"="+p.GPUType)
		if p.CUDAVersions != nil {
			t.Errorf("LocalPools(no driver CUDA) pool %s CUDAVersions = %v; want nil", p.ID, p.CUDAVersions)
		}
	}
	if want := []string{"local=A", "local-2=B", "local-3=C"}; !slices.Equal(got, want) {
		t.Errorf("LocalPools(A, B, C, B) = %v; want %v", got, want)
	}
}

func TestLocalPoolsNoGPU(t *testing.T) {
	t.Parallel()
	got := process.LocalPools(process.Inventory{Description: "no nvidia-smi"})
	if len(got) != 1 {
		t.Fatalf("LocalPools(no GPUs) = %+v; want one pool", got)
	}
	p, n := got[0], runtime.NumCPU()
	if p.ID != "local" || !p.CPU || p.GPUType != "CPU" || p.PerWorker != 1 || p.GPUs != n*process.CPUSlotsPerVCPU || p.VCPUs != n ||
		p.MemoryPerCPU < 1 || p.DataCenter != "LOCAL" || p.Adapter != "process" || len(p.CUDAVersions) != 0 {
		t.Errorf("LocalPools(no GPUs) = %+v; want {ID:local CPU:true GPUType:CPU PerWorker:1 GPUs:%d VCPUs:%d MemoryPerCPU:>=1 DataCenter:LOCAL Adapter:process}", p, n*process.CPUSlotsPerVCPU, n)
	}
	if m := p.GPUsPerWorkerMax(); m != 1 {
		t.Errorf("LocalPools(no GPUs)[0].GPUsPerWorkerMax() = %d; want 1", m)
	}
}

// fakeSMI puts an nvidia-smi on a fresh PATH that answers process.QueryArgs with the query
// fixture, no arguments with the banner fixture, and anything else with exit status 2. An
// empty query makes every call fail.
func fakeSMI(t *testing.T, query, banner string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the fake nvidia-smi is a shell script")
	}
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Skip("no cat on PATH")
	}
	dir := t.TempDir()
	script := "#!/bin/sh\nexit 1\n"
	if query != "" {
		abs := func(name string) string {
			p, err := filepath.Abs(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		script = "#!/bin/sh\n" +
			`if [ "$#" -eq 0 ]; then exec ` + cat + ` '` + abs(banner) + "'; fi\n" +
			`if [ "$#" -eq 2 ] && [ "$1" = '` + process.QueryArgs[0] + `' ] && [ "$2" = '` + process.QueryArgs[1] + `' ]; then exec ` + cat + ` '` + abs(query) + "'; fi\n" +
			"exit 2\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
}

// The Discover tests change PATH, so they do not run in parallel.

func TestDiscoverGPUs(t *testing.T) {
	fakeSMI(t, "query-mixed.csv", "banner-570.txt")
	inv := process.Discover(context.Background())
	if len(inv.GPUs) != 3 || inv.GPUs[2].Name != "NVIDIA L4" || inv.DriverCUDA != "12.8" {
		t.Errorf("Discover() = %+v; want the 3 GPUs of query-mixed.csv and DriverCUDA 12.8", inv)
	}
	if !strings.Contains(inv.Description, "3 GPU") {
		t.Errorf("Discover().Description = %q; want it to count 3 GPUs", inv.Description)
	}
}

func TestDiscoverNoGPUs(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T)
	}{
		{"no nvidia-smi", func(t *testing.T) { t.Setenv("PATH", t.TempDir()) }},
		{"nvidia-smi fails", func(t *testing.T) { fakeSMI(t, "", "") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.setup(t)
			inv := process.Discover(context.Background())
			if len(inv.GPUs) != 0 || inv.DriverCUDA != "" || !strings.Contains(inv.Description, "CPU") {
				t.Errorf("Discover() = %+v; want no GPUs, no CUDA and a description offering CPU slots", inv)
			}
			if pools := process.LocalPools(inv); len(pools) != 1 || !pools[0].CPU {
				t.Errorf("LocalPools(Discover()) = %+v; want one CPU pool", pools)
			}
		})
	}
}
