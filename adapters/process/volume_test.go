package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/adapters/adaptertest"
	"github.com/gantryhq/gantry/adapters/kit"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// volumeImages are the workers of the volume tests: each copies the volume's file $READ to
// $WRITE and adds its uid and $GANTRY_VOLUME_PATH; "mounted" reaches the volume at
// /runpod-volume, "by-env" through $GANTRY_VOLUME_PATH.
var volumeImages = map[string][]string{
	"test/mounted": {"sh", "-c", `set -e; cat "/runpod-volume/$READ" > "/runpod-volume/$WRITE"; echo "uid=$(id -u) path=$GANTRY_VOLUME_PATH" >> "/runpod-volume/$WRITE"`},
	"test/by-env":  {"sh", "-c", `set -e; cat "$GANTRY_VOLUME_PATH/$READ" > "$GANTRY_VOLUME_PATH/$WRITE"; echo "uid=$(id -u)" >> "$GANTRY_VOLUME_PATH/$WRITE"`},
}

// volumeFixture is a pool that keeps volumes under a test directory, and a recorder.
type volumeFixture struct {
	t    *testing.T
	pool *Pool
	rec  *adaptertest.Recorder
	logs string
	n    int
}

func newVolumeFixture(t *testing.T, cfg Config) *volumeFixture {
	t.Helper()
	images := map[string][]string{}
	for k, v := range volumeImages {
		images[k] = v
	}
	for k, v := range cfg.Images {
		images[k] = v
	}
	cfg.Pool, cfg.Images, cfg.LogDir = cpuPool, images, t.TempDir()
	cfg.VolumeRoot = filepath.Join(t.TempDir(), "volumes")
	return &volumeFixture{t: t, pool: newPool(t, cfg), rec: &adaptertest.Recorder{}, logs: cfg.LogDir}
}

// run runs a worker of image with vol, reading read and writing write in the volume, until it
// exits; it returns the Start error, else the exit's.
func (f *volumeFixture) run(image string, vol *core.Volume, read, write string) error {
	f.t.Helper()
	f.n++
	spec := pool.WorkerSpec{
		ID: fmt.Sprintf("vw%d", f.n), Endpoint: fmt.Sprintf("ep%d", f.n), Image: image, Volume: vol,
		Env: map[string]string{"READ": read, "WRITE": write}, Report: f.rec.Report,
	}
	if err := f.pool.Start(context.Background(), spec); err != nil {
		if evs := f.rec.Events(spec.ID); len(evs) > 0 {
			f.t.Errorf("Start of %s failed (%v), yet reported %s", spec.ID, err, adaptertest.FormatEvents(evs))
		}
		return err
	}
	e := f.rec.Wait(f.t, spec.ID, pool.WorkerExited, waitTimeout)
	if e.Err != nil {
		log, _ := os.ReadFile(filepath.Join(f.logs, spec.ID+".log"))
		return fmt.Errorf("%w; its log: %s", e.Err, log)
	}
	return nil
}

// TestVolumeMounted runs workers as root's pool would, as nobody in a mount namespace of
// their own: the first reads at /runpod-volume a file the test put in the volume's
// directory and writes one there that the test finds after it exited, the second (of another
// endpoint) reads what the first wrote. The host's /runpod-volume is not the volume.
func TestVolumeMounted(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skipf("mounting a worker's volume needs root (this test runs as uid %d); without it the pool passes %s instead, which TestVolumeByEnv covers", os.Geteuid(), VolumeEnv)
	}
	f := newVolumeFixture(t, Config{User: "65534:65534"})
	if err := f.pool.namespaces(); err != nil {
		t.Skipf("this root may not make mount namespaces: %v", err)
	}
	if w := f.pool.VolumeWarning(); w != "" {
		t.Errorf("VolumeWarning() = %q; want none as root", w)
	}
	ctx := context.Background()
	vol := &core.Volume{ID: "vol-models", SizeGB: 10}
	if err := f.pool.EnsureVolume(ctx, *vol); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(f.pool.Dirs.Root(), vol.ID)
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("weights v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.run("test/mounted", vol, "in.txt", "out.txt"); err != nil {
		t.Fatalf("the first worker: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	if want := "weights v1\nuid=65534 path=/runpod-volume\n"; err != nil || string(b) != want {
		t.Fatalf("the first worker wrote %q, %v to the volume; want %q", b, err, want)
	}
	if err := f.run("test/mounted", vol, "out.txt", "out2.txt"); err != nil {
		t.Fatalf("the second worker: %v", err)
	}
	b, err = os.ReadFile(filepath.Join(dir, "out2.txt"))
	if want := "weights v1\nuid=65534 path=/runpod-volume\nuid=65534 path=/runpod-volume\n"; err != nil || string(b) != want {
		t.Fatalf("the second worker wrote %q, %v; want %q", b, err, want)
	}
	if host, err := os.Stat(core.VolumeMountPath); err == nil {
		if d, _ := os.Stat(dir); os.SameFile(host, d) {
			t.Errorf("the host's %s is the volume: the worker's mount leaked out of its namespace", core.VolumeMountPath)
		}
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

// TestVolumeUnmountable: a worker whose volume has no directory, or whose program the helper
// cannot run, never runs: Start fails saying why, and no event is sent.
func TestVolumeUnmountable(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skipf("mounting a worker's volume needs root (this test runs as uid %d)", os.Geteuid())
	}
	private := filepath.Join(t.TempDir(), "w.sh") // in a directory nobody may not search
	if err := os.WriteFile(private, []byte("#!/bin/sh\necho ran > /runpod-volume/ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := newVolumeFixture(t, Config{User: "65534:65534", Images: map[string][]string{"test/private": {private}}})
	if err := f.pool.namespaces(); err != nil {
		t.Skipf("this root may not make mount namespaces: %v", err)
	}
	vol := &core.Volume{ID: "vol-x", SizeGB: 10}
	err := f.run("test/mounted", vol, "in.txt", "out.txt")
	if err == nil || !strings.Contains(err.Error(), "network volume vol-x has no directory") {
		t.Errorf("a worker whose volume was never made: %v; want a failed start saying the volume has no directory", err)
	}
	if err := f.pool.EnsureVolume(context.Background(), *vol); err != nil {
		t.Fatal(err)
	}
	err = f.run("test/private", vol, "", "")
	if err == nil || !strings.Contains(err.Error(), "network volume vol-x: mounted, but running "+private+" as uid 65534: permission denied") {
		t.Errorf("a worker whose program its user cannot run: %v; want a failed start saying so", err)
	}
	if _, err := os.Stat(filepath.Join(f.pool.Dirs.Root(), vol.ID, "ran")); err == nil {
		t.Error("the worker's program ran")
	}
	if n := len(f.pool.live.All()); n != 0 {
		t.Errorf("%d workers live after failed starts; want 0", n)
	}
}

// TestVolumeByEnv: where the pool cannot mount (not root, or not allowed to unshare), the
// worker finds its volume's directory in $GANTRY_VOLUME_PATH, and VolumeWarning says so.
func TestVolumeByEnv(t *testing.T) {
	t.Parallel()
	f := newVolumeFixture(t, Config{})
	if os.Geteuid() == 0 { // as if it were not
		f.pool.nsOnce.Do(func() { f.pool.nsErr = errors.New("Gantry does not run as root (a test)") })
	}
	w := f.pool.VolumeWarning()
	if !strings.Contains(w, "cannot mount network volumes at /runpod-volume") || !strings.Contains(w, "$GANTRY_VOLUME_PATH") {
		t.Errorf("VolumeWarning() = %q; want it to say the volume is not mounted and where the worker finds it", w)
	}
	ctx := context.Background()
	vol := &core.Volume{ID: "vol-env", SizeGB: 10}
	if err := f.pool.EnsureVolume(ctx, *vol); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(f.pool.Dirs.Root(), vol.ID)
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("weights v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.run("test/by-env", vol, "in.txt", "out.txt"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	if want := fmt.Sprintf("weights v1\nuid=%d\n", os.Geteuid()); err != nil || string(b) != want {
		t.Errorf("the worker wrote %q, %v; want %q", b, err, want)
	}
}

// TestVolumeNoRoot: a pool without a volume root keeps no volumes, and says which setting
// gives it some.
func TestVolumeNoRoot(t *testing.T) {
	t.Parallel()
	p := newPool(t, Config{Pool: cpuPool, Images: volumeImages})
	if err := p.EnsureVolume(context.Background(), core.Volume{ID: "v"}); err == nil || !strings.Contains(err.Error(), "process.volumeRoot") {
		t.Errorf("EnsureVolume without a root = %v; want an error naming process.volumeRoot", err)
	}
	rec := &adaptertest.Recorder{}
	err := p.Start(context.Background(), pool.WorkerSpec{ID: "w", Image: "test/by-env", Volume: &core.Volume{ID: "v"}, Report: rec.Report})
	if err == nil || !strings.Contains(err.Error(), "keeps no network volumes") {
		t.Errorf("Start with a volume on a pool without a root = %v; want a failed start", err)
	}
}

// TestVolumeRootWithoutNamespaces: a root that may not make mount namespaces (a container
// without CAP_SYS_ADMIN) cannot hand a volume to workers of another user, who may not reach
// the volume root: their start fails saying so, and VolumeWarning says it in advance.
func TestVolumeRootWithoutNamespaces(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skipf("workers of another user need a server running as root (this test runs as uid %d)", os.Geteuid())
	}
	f := newVolumeFixture(t, Config{User: "65534:65534"})
	f.pool.nsOnce.Do(func() { f.pool.nsErr = errors.New("it may not give a process a mount namespace of its own (a test)") })
	if w := f.pool.VolumeWarning(); !strings.Contains(w, "workers with a volume fail to start") {
		t.Errorf("VolumeWarning() = %q; want it to say workers with a volume fail to start", w)
	}
	vol := &core.Volume{ID: "vol-y", SizeGB: 10}
	if err := f.pool.EnsureVolume(context.Background(), *vol); err != nil {
		t.Fatal(err)
	}
	err := f.run("test/by-env", vol, "in.txt", "out.txt")
	if err == nil || !strings.Contains(err.Error(), "network volume vol-y: this pool cannot mount it at /runpod-volume") {
		t.Errorf("Start = %v; want a failed start saying the pool cannot mount the volume", err)
	}
}

// TestVolumeShared runs workers of several endpoints on one volume at once, each reading the
// test's file and writing its own, as many workers share a volume of model weights.
func TestVolumeShared(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skipf("mounting a worker's volume needs root (this test runs as uid %d)", os.Geteuid())
	}
	f := newVolumeFixture(t, Config{User: "65534:65534"})
	if err := f.pool.namespaces(); err != nil {
		t.Skipf("this root may not make mount namespaces: %v", err)
	}
	vol := &core.Volume{ID: "vol-shared", SizeGB: 10}
	if err := f.pool.EnsureVolume(context.Background(), *vol); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(f.pool.Dirs.Root(), vol.ID)
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("weights v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const n = 6
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("shared%d", i)
		spec := pool.WorkerSpec{ID: ids[i], Endpoint: fmt.Sprintf("ep%d", i%3), Image: "test/mounted", Volume: vol,
			Env: map[string]string{"READ": "in.txt", "WRITE": ids[i] + ".txt"}, Report: f.rec.Report}
		if err := f.pool.Start(context.Background(), spec); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if e := f.rec.Wait(t, id, pool.WorkerExited, waitTimeout); e.Err != nil {
			t.Errorf("worker %s: %v", id, e.Err)
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, id+".txt"))
		if want := "weights v1\nuid=65534 path=/runpod-volume\n"; err != nil || string(b) != want {
			t.Errorf("worker %s wrote %q, %v; want %q", id, b, err, want)
		}
	}
}

// TestVolumeFilesystem: with volumeSize filesystem, a worker's /runpod-volume is the volume's
// own filesystem, of the volume's size (1 GB here): the worker writes its size there, and
// the test finds the file in the volume's mounted filesystem. The worker's mount namespace
// holds no volume mount under the root (its copies of the host's are let go of), so that
// deleting another volume frees its loop device.
func TestVolumeFilesystem(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skipf("a volume's filesystem needs root (this test runs as uid %d)", os.Geteuid())
	}
	if _, err := kit.NewVolumeDirs(t.TempDir(), -1, -1, 0o700, kit.VolumeSizeFilesystem, nil); err != nil {
		t.Skipf("this host cannot keep volumes as filesystems: %v", err)
	}
	f := newVolumeFixture(t, Config{User: "65534:65534", VolumeSize: "filesystem",
		Images: map[string][]string{"test/statfs": {"sh", "-c", `set -e; stat -f -c '%b %S' /runpod-volume > "/runpod-volume/$WRITE"; grep -c " $READ/" /proc/self/mountinfo >> "/runpod-volume/$WRITE" || true`}}})
	if err := f.pool.namespaces(); err != nil {
		t.Skipf("this root may not make mount namespaces: %v", err)
	}
	ctx := context.Background()
	vol := &core.Volume{ID: "vol-fs", SizeGB: 1}
	if err := f.pool.EnsureVolume(ctx, *vol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before the volume root is removed: nothing left mounted
		if err := f.pool.DeleteVolume(context.Background(), *vol); err != nil {
			t.Error(err)
		}
	})
	other := core.Volume{ID: "vol-other", SizeGB: 1}
	if err := f.pool.EnsureVolume(ctx, other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.pool.DeleteVolume(context.Background(), other); err != nil {
			t.Error(err)
		}
	})
	if err := f.run("test/statfs", vol, f.pool.Dirs.Root(), "size.txt"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(f.pool.Dirs.Root(), vol.ID, "size.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks, bsize, under int64
	if _, err := fmt.Sscan(string(b), &blocks, &bsize, &under); err != nil || blocks*bsize > 1<<30 || blocks*bsize < 900<<20 {
		t.Errorf("the worker's /runpod-volume has %d blocks of %d bytes (%q, %v); want a filesystem of about 1 GiB", blocks, bsize, b, err)
	}
	if under != 0 {
		t.Errorf("the worker's mount namespace holds %d mounts under the volume root; want 0", under)
	}
}

// TestVolumeSizeSetting: a volumeSize the pool does not know is refused, naming the setting.
func TestVolumeSizeSetting(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Pool: cpuPool, VolumeRoot: t.TempDir(), VolumeSize: "quota"})
	if err == nil || !strings.Contains(err.Error(), `volumeSize "quota"`) {
		t.Errorf("New with volumeSize quota = %v; want an error naming volumeSize", err)
	}
}
