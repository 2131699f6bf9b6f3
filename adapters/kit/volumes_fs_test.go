package kit

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// fsVolumes returns volumes kept as filesystems under a temporary root, a "GB" being 1 MiB,
// and unmounts whatever the test left mounted there when it ends. It skips the test where
// the host cannot have them.
func fsVolumes(t *testing.T, root string, uid, gid int) *VolumeDirs {
	t.Helper()
	if err := canEnforce(); err != nil {
		t.Skipf("volumes as filesystems need root, loop devices and e2fsprogs: %v", err)
	}
	v, err := NewVolumeDirs(root, uid, gid, 0o770, VolumeSizeFilesystem, nil)
	if err != nil {
		t.Fatal(err)
	}
	v.gb = 1 << 20
	t.Cleanup(func() { unmountUnder(t, v.Root()) })
	return v
}

// unmountUnder unmounts every mount under root (before the temporary directory is removed).
func unmountUnder(t *testing.T, root string) {
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		for range 4 {
			if src, _ := mountSource(p); src == "" {
				break
			}
			if err := syscall.Unmount(p, 0); err != nil {
				t.Errorf("left mounted: %s: %v", p, err)
				_ = syscall.Unmount(p, syscall.MNT_DETACH)
			}
		}
	}
}

// writeFile writes n bytes to path, syncing them so that ENOSPC shows here.
func writeFile(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = f.Write(bytes.Repeat([]byte("w"), n))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// grow runs Ensure to grow vol, again while another mount namespace holds its filesystem for
// a while: without CAP_SYS_RESOURCE it grows only unmounted, and any process that made a
// mount namespace of its own while the volume was mounted (a worker of another test
// package's pool, running at the same time) holds a copy until it exits.
func grow(t *testing.T, v *VolumeDirs, vol core.Volume) error {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := v.Ensure(context.Background(), vol)
		if err == nil || !strings.Contains(err.Error(), "running workers use it") || time.Now().After(deadline) {
			return err
		}
	}
}

// mounts counts the mounts at dir in this mount namespace.
func mounts(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 4 && UnescapeMount(f[4]) == dir {
			n++
		}
	}
	return n
}

// TestVolumeFilesystem keeps a volume as a filesystem of its size: a write past it fails with
// ENOSPC, a resize grows it (never shrinks it), a new VolumeDirs on the root (a restart)
// finds it mounted, and after an unmount (a reboot) mounts it again with its data; Delete
// leaves nothing mounted and removes the image.
func TestVolumeFilesystem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "vol root") // a space: mountinfo escapes it
	v := fsVolumes(t, root, 65534, 65534)
	vol := core.Volume{ID: "vol-1", SizeGB: 16}
	if err := v.Ensure(ctx, vol); err != nil {
		t.Fatalf("Ensure = %v", err)
	}
	dir := filepath.Join(v.Root(), vol.ID)
	img := filepath.Join(v.Root(), ".images", "vol-1.ext4")
	if n := mounts(t, dir); n != 1 {
		t.Fatalf("%d mounts at %s after Ensure; want 1", n, dir)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 || fi.Mode().Perm() != 0o770 {
		t.Errorf("the volume's root is %d:%d %v; want 65534:65534 0770", st.Uid, st.Gid, fi.Mode().Perm())
	}
	if fi, err := os.Stat(img); err != nil || fi.Size() != 16<<20 {
		t.Fatalf("image %s: %v, %v; want 16 MiB", img, fi, err)
	}
	err = writeFile(filepath.Join(dir, "big"), 24<<20)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing 24 MiB to a 16 MiB volume: %v; want ENOSPC", err)
	}
	_ = os.Remove(filepath.Join(dir, "big"))
	if used, err := v.Usage(ctx, vol); err != nil || used <= 0 || used > 16<<20 {
		t.Errorf("Usage = %d, %v; want some bytes, at most 16 MiB", used, err)
	}

	vol.SizeGB = 64
	if err := grow(t, v, vol); err != nil {
		t.Fatalf("Ensure to 64 = %v", err)
	}
	if err := writeFile(filepath.Join(dir, "big"), 24<<20); err != nil {
		t.Fatalf("writing 24 MiB after the resize to 64 MiB: %v", err)
	}
	if used, err := v.Usage(ctx, vol); err != nil || used < 24<<20 || used > 64<<20 {
		t.Errorf("Usage = %d, %v; want 24 to 64 MiB", used, err)
	}
	if err := v.Ensure(ctx, core.Volume{ID: vol.ID, SizeGB: 16}); err != nil {
		t.Fatalf("Ensure to a smaller size = %v", err)
	}
	if fi, err := os.Stat(img); err != nil || fi.Size() != 64<<20 {
		t.Errorf("after Ensure to a smaller size, the image: %v, %v; want it still 64 MiB", fi, err)
	}

	// A restart: a new VolumeDirs finds it mounted, and mounts it no second time.
	v2 := fsVolumes(t, root, 65534, 65534)
	if err := v2.Ensure(ctx, vol); err != nil {
		t.Fatal(err)
	}
	if n := mounts(t, dir); n != 1 {
		t.Errorf("%d mounts at %s after a restart's Ensure; want 1", n, dir)
	}
	// A reboot: nothing mounted. Dir mounts it before a worker could write to the bare
	// directory; Ensure would too.
	if err := syscall.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	v3 := fsVolumes(t, root, 65534, 65534) // mounts it at once
	if n := mounts(t, dir); n != 1 {
		t.Fatalf("%d mounts at %s after a reboot's NewVolumeDirs; want 1", n, dir)
	}
	if err := syscall.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	if d, err := v3.Dir(vol.ID); err != nil || d != dir {
		t.Fatalf("Dir after a reboot = %q, %v", d, err)
	}
	if n := mounts(t, dir); n != 1 {
		t.Fatalf("%d mounts at %s after a reboot's Dir; want 1", n, dir)
	}
	if fi, err := os.Stat(filepath.Join(dir, "big")); err != nil || fi.Size() != 24<<20 {
		t.Errorf("after a reboot, the volume's file: %v, %v; want 24 MiB", fi, err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || int64(st.Blocks)*st.Bsize < 48<<20 {
		t.Errorf("after a reboot, the filesystem has %d bytes, %v; want about 64 MiB", int64(st.Blocks)*st.Bsize, err)
	}

	if err := v3.Delete(ctx, vol); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	if n := mounts(t, dir); n != 0 {
		t.Errorf("%d mounts at %s after Delete; want 0", n, dir)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Delete, %s: %v; want it gone", dir, err)
	}
	if _, err := os.Lstat(img); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Delete, %s: %v; want it gone", img, err)
	}
	// (another test package's worker that copied the mount holds the device until it exits)
	waitFor(t, func() bool { return len(loopsBacking(img)) == 0 })
	if err := v3.Delete(ctx, vol); err != nil {
		t.Errorf("Delete of a deleted volume = %v; want nil", err)
	}
	if _, err := v3.Dir(vol.ID); err == nil || !strings.Contains(err.Error(), "has no directory") {
		t.Errorf("Dir of a deleted volume = %v; want an error saying it has no directory", err)
	}
}

// TestVolumeFilesystemBusy: Delete of a volume a process on this host uses (its working
// directory) fails saying so, and keeps the data; once it is no longer used, Delete works.
func TestVolumeFilesystemBusy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := fsVolumes(t, filepath.Join(t.TempDir(), "volumes"), -1, -1)
	vol := core.Volume{ID: "busy", SizeGB: 16}
	if err := v.Ensure(ctx, vol); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(v.Root(), vol.ID)
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "keep"))
	if err != nil {
		t.Fatal(err)
	}
	err = v.Delete(ctx, vol)
	f.Close()
	if err == nil || !strings.Contains(err.Error(), "a process on this host uses it") {
		t.Errorf("Delete of a volume in use = %v; want an error saying it is used", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "keep")); err != nil {
		t.Errorf("a failed Delete lost the data: %v", err)
	}
	if err := v.Delete(ctx, vol); err != nil {
		t.Errorf("Delete once unused = %v", err)
	}
}

// TestVolumeFilesystemLegacy: a volume whose directory holds data from before its pool kept
// filesystems stays a plain directory, its data in place; Delete removes it.
func TestVolumeFilesystemLegacy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "volumes")
	old, err := NewVolumeDirs(root, -1, -1, 0o770, VolumeSizeReport, nil)
	if err != nil {
		t.Fatal(err)
	}
	vol := core.Volume{ID: "old", SizeGB: 16}
	if err := old.Ensure(ctx, vol); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, vol.ID)
	if err := os.WriteFile(filepath.Join(dir, "weights"), []byte("w"), 0o600); err != nil {
		t.Fatal(err)
	}
	v := fsVolumes(t, root, -1, -1)
	if err := v.Ensure(ctx, vol); err != nil {
		t.Fatal(err)
	}
	if n := mounts(t, dir); n != 0 {
		t.Errorf("a directory with data was mounted over (%d mounts)", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "weights")); err != nil {
		t.Errorf("the old volume's data: %v", err)
	}
	if err := v.Delete(ctx, vol); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Delete, %s: %v; want it gone", dir, err)
	}
}

// TestVolumeSizeMode: the size modes the setting accepts, and what auto is in a test.
func TestVolumeSizeMode(t *testing.T) {
	t.Parallel()
	if _, err := NewVolumeDirs(t.TempDir(), -1, -1, 0o770, "quota", nil); err == nil || !strings.Contains(err.Error(), `volumeSize "quota": want auto, filesystem or report`) {
		t.Errorf("NewVolumeDirs with size mode quota = %v; want an error naming the modes", err)
	}
	for _, m := range []string{"", VolumeSizeAuto, VolumeSizeReport} {
		v, err := NewVolumeDirs(t.TempDir(), -1, -1, 0o770, m, nil)
		if err != nil || v.Enforced() {
			t.Errorf("NewVolumeDirs with size mode %q in a test = %v, enforced %v; want report", m, err, v != nil && v.Enforced())
		}
	}
	_, err := NewVolumeDirs(t.TempDir(), -1, -1, 0o770, VolumeSizeFilesystem, nil)
	if why := canEnforce(); (why == nil) != (err == nil) {
		t.Errorf("NewVolumeDirs(filesystem) = %v where the host can enforce: %v", err, why)
	}
}

// TestVolumeFilesystemGrowHeld: a volume whose filesystem another mount holds (as a worker's
// mount namespace does) grows online where Gantry has CAP_SYS_RESOURCE; without it, the
// resize fails saying why, and the volume keeps its size and data, mounted.
func TestVolumeFilesystemGrowHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := t.TempDir()
	v := fsVolumes(t, filepath.Join(base, "volumes"), -1, -1)
	vol := core.Volume{ID: "held", SizeGB: 16}
	if err := v.Ensure(ctx, vol); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(v.Root(), vol.ID)
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	worker := filepath.Join(base, "worker")
	if err := os.Mkdir(worker, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(dir, worker, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(worker, syscall.MNT_DETACH) })
	vol.SizeGB = 64
	err := v.Ensure(ctx, vol)
	online := capable(24) // CAP_SYS_RESOURCE
	if online && err != nil {
		t.Fatalf("Ensure to 64 with CAP_SYS_RESOURCE = %v", err)
	}
	if !online && (err == nil || !strings.Contains(err.Error(), "cannot grow unmounted while running workers use it")) {
		t.Fatalf("Ensure to 64 without CAP_SYS_RESOURCE while held = %v; want an error saying workers use it", err)
	}
	if fi, err := os.Stat(v.image(vol.ID)); !online && (err != nil || fi.Size() != 16<<20) {
		t.Errorf("after a resize that failed, the image: %v, %v; want it back to 16 MiB", fi, err)
	}
	if n := mounts(t, dir); n != 1 {
		t.Errorf("%d mounts at %s after the resize; want 1", n, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "keep")); err != nil {
		t.Errorf("after the resize, the data: %v", err)
	}
	if src, _ := mountSource(dir); src != "" {
		if wsrc, _ := mountSource(worker); wsrc != src {
			t.Errorf("the volume is mounted from %s, the worker's mount from %s; want one loop device", src, wsrc)
		}
	}
	_ = syscall.Unmount(worker, 0)
	if err := grow(t, v, vol); err != nil { // no longer held: it grows
		t.Fatalf("Ensure to 64 once no longer held = %v", err)
	}
	if err := writeFile(filepath.Join(dir, "big"), 24<<20); err != nil {
		t.Errorf("writing 24 MiB after the resize to 64 MiB: %v", err)
	}
	if err := v.Delete(ctx, vol); err != nil {
		t.Fatal(err)
	}
}

// TestVolumeSharedFS: a root on a local filesystem is not shared; the parents of a root not
// yet made are looked at instead.
func TestVolumeSharedFS(t *testing.T) {
	t.Parallel()
	if err := onSharedFS(filepath.Join(t.TempDir(), "not", "made")); err != nil {
		t.Errorf("onSharedFS of a temporary directory = %v; want nil", err)
	}
	if _, ok := sharedFS[0x6969]; !ok {
		t.Error("NFS is not among the shared filesystems")
	}
}

// TestVolumeFilesystemResumeGrow: an image longer than its filesystem (a crash between the
// two steps of a resize) is grown into on the next Ensure.
func TestVolumeFilesystemResumeGrow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := fsVolumes(t, filepath.Join(t.TempDir(), "volumes"), -1, -1)
	vol := core.Volume{ID: "cut", SizeGB: 16}
	if err := v.Ensure(ctx, vol); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(v.image(vol.ID), 64<<20); err != nil {
		t.Fatal(err)
	}
	var have int64
	for deadline := time.Now().Add(20 * time.Second); have != 64<<20 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := v.Ensure(ctx, vol); err != nil { // a warning while another namespace holds it
			t.Fatal(err)
		}
		src, _ := mountSource(filepath.Join(v.Root(), vol.ID))
		have, _ = fsBytes(ctx, src)
	}
	if have != 64<<20 {
		t.Errorf("after Ensure, the filesystem has %d bytes; want 64 MiB", have)
	}
	if err := v.Delete(ctx, vol); err != nil {
		t.Fatal(err)
	}
}

// TestVolumeFilesystemOtherMode: a VolumeDirs of mode report on a root where a volume is a
// filesystem (a process and a docker pool sharing a root, or a setting changed) mounts it,
// measures it and deletes it as one, and makes no filesystem for a new volume.
func TestVolumeFilesystemOtherMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := fsVolumes(t, filepath.Join(t.TempDir(), "volumes"), -1, -1)
	vol := core.Volume{ID: "fs", SizeGB: 16}
	if err := v.Ensure(ctx, vol); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(v.Root(), vol.ID)
	if err := syscall.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	r, err := NewVolumeDirs(v.Root(), -1, -1, 0o770, VolumeSizeReport, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Dir(vol.ID); err != nil || mounts(t, dir) != 1 {
		t.Fatalf("Dir of a filesystem volume in mode report = %v, %d mounts; want it mounted", err, mounts(t, dir))
	}
	if err := r.Ensure(ctx, core.Volume{ID: "plain", SizeGB: 16}); err != nil || r.hasImage("plain") {
		t.Errorf("Ensure of a new volume in mode report = %v, image %v; want a plain directory", err, r.hasImage("plain"))
	}
	if err := r.Delete(ctx, vol); err != nil {
		t.Fatal(err)
	}
	if n := mounts(t, dir); n != 0 || r.hasImage(vol.ID) {
		t.Errorf("after Delete in mode report: %d mounts, image %v; want none", n, r.hasImage(vol.ID))
	}
}
