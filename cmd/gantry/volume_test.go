package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantryhq/gantry/adapters/adaptertest"
	"github.com/gantryhq/gantry/adapters/process"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// TestVolumeMountHelper runs a Python worker through a process pool whose Self is the real
// gantry binary, as `gantry serve` as root does: the binary's hidden `__mountns` command
// mounts the worker's network volume at /runpod-volume in a namespace of its own and runs the
// worker as nobody, which reads a file the test put in the volume and writes one back.
func TestVolumeMountHelper(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skipf("mounting a worker's volume needs root (this test runs as uid %d); without it the process pool passes $%s instead", os.Geteuid(), process.VolumeEnv)
	}
	python := workerPython(t)
	bin := buildGantry(t)
	script := filepath.Join(filepath.Dir(bin), "volworker.py") // where nobody can read it
	src := "import os\n" +
		"d = '/runpod-volume'\n" +
		"data = open(os.path.join(d, 'in.txt')).read()\n" +
		"open(os.path.join(d, 'out.txt'), 'w').write(data + 'uid=%d path=%s\\n' % (os.getuid(), os.environ['GANTRY_VOLUME_PATH']))\n"
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	volumes := filepath.Join(t.TempDir(), "volumes")
	pl, err := process.New(process.Config{
		Pool: core.PoolInfo{ID: "local", GPUType: "CPU", GPUs: 1, CPU: true}, Self: bin, Builtins: []string{"echo"},
		Images: map[string][]string{"example/vol:1": {python, script}}, LogDir: t.TempDir(),
		User: "65534:65534", VolumeRoot: volumes,
	})
	if err != nil {
		t.Fatal(err)
	}
	if w := pl.VolumeWarning(); w != "" {
		t.Skipf("this root cannot mount volumes: %s", w)
	}
	ctx := context.Background()
	vol := core.Volume{ID: "vol-py", SizeGB: 10}
	if err := pl.EnsureVolume(ctx, vol); err != nil {
		t.Fatal(err)
	}
	volDir := filepath.Join(volumes, vol.ID)
	if err := os.WriteFile(filepath.Join(volDir, "in.txt"), []byte("weights v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &adaptertest.Recorder{}
	spec := pool.WorkerSpec{ID: "py-1", Endpoint: "ep", Image: "example/vol:1", Volume: &vol, Report: rec.Report}
	if err := pl.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if e := rec.Wait(t, spec.ID, pool.WorkerExited, 30*time.Second); e.Err != nil {
		t.Fatalf("the worker: %v", e.Err)
	}
	b, err := os.ReadFile(filepath.Join(volDir, "out.txt"))
	if want := "weights v1\nuid=65534 path=/runpod-volume\n"; err != nil || string(b) != want {
		t.Errorf("the Python worker wrote %q, %v to its volume; want %q", b, err, want)
	}
}
