package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/adapters/kit"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// TestVolumeBindMount runs workers of two endpoints sharing a network volume on a real
// engine: the first reads at /runpod-volume a file the test put in the volume's directory
// before it started and writes one the test finds after its container is gone; the second
// reads what the first wrote. Then the volume is measured and deleted.
func TestVolumeBindMount(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{VolumeRoot: filepath.Join(t.TempDir(), "volumes"), LogDir: t.TempDir()})
	ctx := context.Background()
	vol := &core.Volume{ID: "vol-models", SizeGB: 10}
	if err := f.pool.EnsureVolume(ctx, *vol); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(f.pool.Dirs.Root(), vol.ID)
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("weights v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(endpoint, read, write string) {
		t.Helper()
		spec := f.spec("volume")
		spec.Endpoint, spec.Volume = endpoint, vol
		spec.Env["READ"], spec.Env["WRITE"] = read, write
		f.start(spec)
		if e := f.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout); e.Err != nil {
			t.Fatalf("worker %s of %s: %v", spec.ID, endpoint, e.Err)
		}
	}
	run("ep-a", "in.txt", "out.txt")
	b, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	if want := "weights v1\npath=/runpod-volume\n"; err != nil || string(b) != want {
		t.Fatalf("the first worker wrote %q, %v to the volume; want %q", b, err, want)
	}
	run("ep-b", "out.txt", "out2.txt")
	b, err = os.ReadFile(filepath.Join(dir, "out2.txt"))
	if want := "weights v1\npath=/runpod-volume\npath=/runpod-volume\n"; err != nil || string(b) != want {
		t.Fatalf("the second endpoint's worker wrote %q, %v; want %q", b, err, want)
	}
	if used, err := f.pool.VolumeUsage(ctx, *vol); err != nil || used <= 0 {
		t.Errorf("VolumeUsage = %d, %v; want some bytes", used, err)
	}
	if err := f.pool.DeleteVolume(ctx, *vol); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after DeleteVolume the directory: %v; want it gone", err)
	}
}

// TestVolumeMissing: a worker whose volume has no directory, or whose pool keeps no volumes,
// never runs: Start fails saying why, before any container is made.
func TestVolumeMissing(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{VolumeRoot: filepath.Join(t.TempDir(), "volumes")})
	spec := f.spec("volume")
	spec.Volume = &core.Volume{ID: "vol-never-made", SizeGB: 10}
	err := f.pool.Start(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "network volume vol-never-made has no directory") {
		t.Errorf("Start with a volume never made = %v; want an error saying it has no directory", err)
	}
	if _, ok := f.inspect(spec.ID); ok {
		t.Error("a container was made for a worker without its volume")
	}

	g := setup(t, Config{})
	if err := g.pool.EnsureVolume(context.Background(), *spec.Volume); err == nil || !strings.Contains(err.Error(), "docker.volumeRoot") {
		t.Errorf("EnsureVolume on a pool without a volume root = %v; want an error naming docker.volumeRoot", err)
	}
	spec = g.spec("volume")
	spec.Volume = &core.Volume{ID: "v", SizeGB: 10}
	if err := g.pool.Start(context.Background(), spec); err == nil || !strings.Contains(err.Error(), "keeps no network volumes") {
		t.Errorf("Start with a volume on a pool without a volume root = %v; want a failed start", err)
	}
}

// TestVolumeFilesystem: with volumeSize filesystem, the engine binds the volume's mounted
// filesystem (not the empty directory under it): a worker reads the test's file and writes
// one the test finds in the filesystem, which Delete then unmounts and removes.
func TestVolumeFilesystem(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skipf("a volume's filesystem needs root (this test runs as uid %d)", os.Geteuid())
	}
	if _, err := kit.NewVolumeDirs(t.TempDir(), -1, -1, 0o700, kit.VolumeSizeFilesystem, nil); err != nil {
		t.Skipf("this host cannot keep volumes as filesystems: %v", err)
	}
	f := setup(t, Config{VolumeRoot: filepath.Join(t.TempDir(), "volumes"), VolumeSize: "filesystem", LogDir: t.TempDir()})
	ctx := context.Background()
	vol := &core.Volume{ID: "vol-fs", SizeGB: 1}
	if err := f.pool.EnsureVolume(ctx, *vol); err != nil {
		t.Fatal(err)
	}
	deleted := false
	t.Cleanup(func() { // nothing left mounted under the temporary directory
		if !deleted {
			_ = f.pool.DeleteVolume(context.Background(), *vol)
		}
	})
	dir := filepath.Join(f.pool.Dirs.Root(), vol.ID)
	if _, err := os.Stat(filepath.Join(dir, "lost+found")); err != nil {
		t.Fatalf("the volume's directory is not an ext4 filesystem: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("weights v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := f.spec("volume")
	spec.Volume = vol
	spec.Env["READ"], spec.Env["WRITE"] = "in.txt", "out.txt"
	f.start(spec)
	if e := f.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout); e.Err != nil {
		t.Fatalf("worker: %v", e.Err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	if want := "weights v1\npath=/runpod-volume\n"; err != nil || string(b) != want {
		t.Fatalf("the worker wrote %q, %v to the volume; want %q", b, err, want)
	}
	deleted = true
	if err := f.pool.DeleteVolume(ctx, *vol); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after DeleteVolume the directory: %v; want it gone", err)
	}
}

// TestEngineSeesMounts: the local engine of the tests shares their mount namespace (so auto
// keeps filesystems); a remote one does not.
func TestEngineSeesMounts(t *testing.T) {
	t.Parallel()
	if err := engineSeesMounts("tcp://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "is not local") {
		t.Errorf("engineSeesMounts(tcp) = %v; want an error saying the engine is not local", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("reading the engine's mount namespace needs root")
	}
	if err := engineSeesMounts(""); err != nil {
		t.Errorf("engineSeesMounts of the local engine = %v", err)
	}
}
