package kit

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// TestVolumeDirs makes a volume, finds it again after a second Ensure (nothing lost), measures
// it, and deletes it with what it holds.
func TestVolumeDirs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "volumes")
	logs := &syncBuffer{}
	v, err := NewVolumeDirs(root, -1, -1, 0o770, VolumeSizeReport, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	vol := core.Volume{ID: "vol-1", SizeGB: 10}
	if err := v.Ensure(ctx, vol); err != nil {
		t.Fatalf("Ensure = %v", err)
	}
	dir := filepath.Join(root, "vol-1")
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o770 {
		t.Fatalf("after Ensure, %s: %v %v; want a directory of mode 0770", dir, fi, err)
	}
	if fi, _ := os.Stat(root); fi.Mode().Perm() != 0o700 {
		t.Errorf("the volume root has mode %v; want 0700", fi.Mode().Perm())
	}
	if err := os.MkdirAll(filepath.Join(dir, "models"), 0o755); err != nil {
		t.Fatal(err)
	}
	weights := bytes.Repeat([]byte("w"), 64<<10)
	if err := os.WriteFile(filepath.Join(dir, "models", "w.bin"), weights, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := v.Ensure(ctx, vol); err != nil {
		t.Fatalf("Ensure again = %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "models", "w.bin")); err != nil || !bytes.Equal(got, weights) {
		t.Fatalf("a second Ensure lost the volume's data: %v", err)
	}
	if d, err := v.Dir("vol-1"); err != nil || d != dir {
		t.Errorf("Dir = %q, %v; want %s", d, err, dir)
	}
	used, err := v.Usage(ctx, vol)
	if err != nil || used < int64(len(weights)) || used > 1<<20 {
		t.Errorf("Usage = %d, %v; want about %d bytes", used, err, len(weights))
	}
	if logs.String() != "" {
		t.Errorf("Usage under the size logged %q", logs.String())
	}
	// A sparse file counts its blocks, not its length.
	if f, err := os.Create(filepath.Join(dir, "sparse")); err == nil {
		_ = f.Truncate(1 << 30)
		f.Close()
	}
	if used2, _ := v.Usage(ctx, vol); used2 > used+1<<20 {
		t.Errorf("Usage counted a sparse file's length: %d bytes", used2)
	}
	if _, err := v.Usage(ctx, core.Volume{ID: "vol-1"}); err != nil || logs.String() != "" {
		t.Errorf("Usage of a volume without a size = %v, logged %q; want no warning", err, logs.String())
	}
	small, _ := NewVolumeDirs(root, -1, -1, 0o770, VolumeSizeReport, v.log)
	small.gb = 1 << 10 // the volume's 10 "GB" are 10 KiB here, and it holds 64 KiB
	if _, err := small.Usage(ctx, vol); err != nil || !strings.Contains(logs.String(), "holds more than its size") {
		t.Errorf("Usage over the size = %v, logged %q; want a warning", err, logs.String())
	}
	if err := v.Ensure(ctx, vol); err != nil { // measured 1 ms ago by the first Ensure: not again
		t.Fatal(err)
	}

	if err := v.Delete(ctx, vol); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Delete, %s: %v; want it gone", dir, err)
	}
	if err := v.Delete(ctx, vol); err != nil {
		t.Errorf("Delete of a deleted volume = %v; want nil", err)
	}
	if used, err := v.Usage(ctx, vol); err != nil || used != 0 {
		t.Errorf("Usage of a deleted volume = %d, %v; want 0, nil", used, err)
	}
	if _, err := v.Dir("vol-1"); err == nil || !strings.Contains(err.Error(), "has no directory") {
		t.Errorf("Dir of a deleted volume = %v; want an error saying it has no directory", err)
	}
}

// TestVolumeDirsEscape refuses ids that would name a path outside the root, and a volume
// directory replaced by a link.
func TestVolumeDirsEscape(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := t.TempDir()
	root := filepath.Join(base, "volumes")
	victim := filepath.Join(base, "victim")
	if err := os.MkdirAll(filepath.Join(victim, "keep"), 0o700); err != nil {
		t.Fatal(err)
	}
	v, err := NewVolumeDirs(root, -1, -1, 0o770, VolumeSizeReport, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", ".", "..", "../victim", "a/../../victim", "/etc", "a/b", `a\b`, ".hidden", "-x", strings.Repeat("a", 129), "a\x00b"} {
		if err := v.Delete(ctx, core.Volume{ID: id}); err == nil {
			t.Errorf("Delete(%q) = nil; want an error", id)
		}
		if err := v.Ensure(ctx, core.Volume{ID: id}); err == nil {
			t.Errorf("Ensure(%q) = nil; want an error", id)
		}
		if _, err := v.Usage(ctx, core.Volume{ID: id}); err == nil {
			t.Errorf("Usage(%q) = nil; want an error", id)
		}
		if _, err := v.Dir(id); err == nil {
			t.Errorf("Dir(%q) = nil; want an error", id)
		}
	}
	if _, err := os.Stat(filepath.Join(victim, "keep")); err != nil {
		t.Fatalf("a refused id removed data outside the root: %v", err)
	}
	// A link where a volume's directory goes is not followed: not mounted, not made.
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(root, "linked")); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Dir("linked"); err == nil {
		t.Error("Dir of a volume whose directory is a link = nil; want an error")
	}
	if err := v.Ensure(ctx, core.Volume{ID: "linked"}); err == nil {
		t.Error("Ensure of a volume whose directory is a link = nil; want an error")
	}
	if err := v.Delete(ctx, core.Volume{ID: "linked"}); err != nil {
		t.Errorf("Delete of a link = %v", err)
	}
	if _, err := os.Stat(filepath.Join(victim, "keep")); err != nil {
		t.Fatalf("Delete followed a link out of the root: %v", err)
	}
}

// TestVolumeDirsOwner gives a volume's directory to the workers' user (needs root to chown).
func TestVolumeDirsOwner(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("giving a directory to another user needs root")
	}
	root := filepath.Join(t.TempDir(), "volumes")
	v, err := NewVolumeDirs(root, 65534, 65534, 0o770, VolumeSizeReport, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Ensure(context.Background(), core.Volume{ID: "v"}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(root, "v"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 {
		t.Errorf("volume directory owned by %d:%d; want 65534:65534", st.Uid, st.Gid)
	}
}

// TestVolumeDirsDeleteUnwritable removes a volume in which a worker took the write permission
// off a directory.
func TestVolumeDirsDeleteUnwritable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v, err := NewVolumeDirs(t.TempDir(), -1, -1, 0o770, VolumeSizeReport, nil)
	if err != nil {
		t.Fatal(err)
	}
	vol := core.Volume{ID: "v"}
	if err := v.Ensure(ctx, vol); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(v.Root(), "v", "ro")
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sub, 0o500); err != nil {
		t.Fatal(err)
	}
	if err := v.Delete(ctx, vol); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	if _, err := os.Lstat(filepath.Join(v.Root(), "v")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Delete: %v; want the directory gone", err)
	}
}

// TestVolumeDirsEnsureWarns: Ensure has a volume over its size measured in the background, so
// that the warning is logged while workers start, and not again within checkEvery.
func TestVolumeDirsEnsureWarns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logs := &syncBuffer{}
	v, err := NewVolumeDirs(t.TempDir(), -1, -1, 0o770, VolumeSizeReport, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	v.gb = 1 << 10 // a "GB" is 1 KiB: the volume's directory alone (a block) is over 1
	vol := core.Volume{ID: "v", SizeGB: 1}
	if err := v.Ensure(ctx, vol); err != nil {
		t.Fatal(err)
	}
	warned := func() int { return strings.Count(logs.String(), "holds more than its size") }
	waitFor(t, func() bool { return warned() == 1 })
	checked := func() time.Time { v.mu.Lock(); defer v.mu.Unlock(); return v.checked[vol.ID] }
	first := checked()
	if err := v.Ensure(ctx, vol); err != nil { // within checkEvery: not measured again
		t.Fatal(err)
	}
	if again := checked(); !again.Equal(first) {
		t.Errorf("a second Ensure within %v had the volume measured again (at %v, first at %v)", checkEvery, again, first)
	}
	if n := warned(); n != 1 {
		t.Errorf("%d warnings after a second Ensure within %v; want 1", n, checkEvery)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger in another goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
	}
}
