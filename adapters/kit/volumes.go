package kit

// This file keeps network volumes as directories on a local host (issue 30): the storage
// behind the process and Docker pools' scheduler.VolumeStorage.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// VolumeDirs keeps each network volume as the directory <Root>/<volume id>. The directory is
// made by Ensure and removed, with everything in it, by Delete and nothing else: the data
// outlives workers, endpoints and restarts.
//
// How the size is kept depends on the size mode (volumes_fs.go). In VolumeSizeFilesystem the
// directory is the mount point of an ext4 filesystem of the volume's size, in the sparse
// image <Root>/.images/<volume id>.ext4 on a loop device: a write past the size fails with
// ENOSPC. In VolumeSizeReport it is a plain directory, which has no quota: Usage reports the
// bytes a volume holds and logs a warning when it holds more than its size.
//
// The root is created on first use with mode 0700: only the server's user (and root) can
// reach a volume through it. A worker reaches its own volume through a bind mount (which
// does not search the directories above it) or, where the process pool cannot mount, as the
// server's own user.
type VolumeDirs struct {
	root string
	uid  int         // owner given to a volume's directory; -1 = leave it
	gid  int         // its group; -1 = leave it
	mode fs.FileMode // permissions given to a volume's directory
	log  *slog.Logger
	gb   int64 // bytes in a GB of a volume's size: 1 GiB (tests shrink it)
	fs   bool  // each volume is a filesystem of its size (VolumeSizeFilesystem)

	fsMu sync.Mutex // held while a volume's filesystem is made, mounted, grown or removed

	mu      sync.Mutex
	checked map[string]time.Time // when Ensure last had each volume measured
}

// checkEvery is how often Ensure has a volume measured, at most, for the size warning.
const checkEvery = 10 * time.Minute

// NewVolumeDirs returns volumes kept under root, made absolute. Each volume's directory gets
// the owner uid:gid (-1: leave it as made, the server's user) and the permissions mode, on
// each Ensure, so that the workers' user can write it. sizeMode is VolumeSizeAuto ("" too),
// VolumeSizeFilesystem or VolumeSizeReport: an error says why the host cannot have
// VolumeSizeFilesystem where it is asked for; auto falls back to report and logs why. log
// receives the warnings (nil: slog.Default()).
func NewVolumeDirs(root string, uid, gid int, mode fs.FileMode, sizeMode string, log *slog.Logger) (*VolumeDirs, error) {
	if root == "" {
		return nil, errors.New("the volume root is empty")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("the volume root %s: %w", root, err)
	}
	resolved, why, err := resolveSizeMode(sizeMode, filepath.Clean(abs))
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	if why != nil {
		log.Warn("network volumes' sizes are not enforced: each volume is a plain directory, whose bytes are measured and warned of past its size; volumeSize auto keeps a filesystem of its size per volume where it can, and here it cannot",
			"root", abs, "why", why.Error())
	}
	v := &VolumeDirs{root: filepath.Clean(abs), uid: uid, gid: gid, mode: mode.Perm(), log: log, gb: 1 << 30, fs: resolved == VolumeSizeFilesystem, checked: map[string]time.Time{}}
	if v.fs {
		v.mountAll()
	}
	return v, nil
}

// Enforced reports whether the volumes' sizes are enforced: each is a filesystem of its size.
func (v *VolumeDirs) Enforced() bool { return v.fs }

// Root returns the directory the volumes are kept under.
func (v *VolumeDirs) Root() string { return v.root }

// volumeIDRE is what a volume id may be to name a directory: no separator, not "." or "..".
var volumeIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// Path returns the directory of volume id, or why id cannot name one (a separator, "..": a
// path out of the root). It does not look at the disk.
func (v *VolumeDirs) Path(id string) (string, error) {
	if !volumeIDRE.MatchString(id) {
		return "", fmt.Errorf("network volume id %q cannot name a directory: want letters, digits, '_', '.' and '-' (at most 128, starting with a letter or digit)", id)
	}
	p := filepath.Join(v.root, id)
	if filepath.Dir(p) != v.root { // the check above makes this impossible; tenants are hostile
		return "", fmt.Errorf("network volume id %q names %s, outside the volume root %s", id, p, v.root)
	}
	return p, nil
}

// Dir returns the directory of an existing volume, for mounting: an error says why there is
// none (never made, not a plain directory).
func (v *VolumeDirs) Dir(id string) (string, error) {
	p, err := v.Path(id)
	if err != nil {
		return "", err
	}
	// A filesystem not mounted (a reboot) is mounted before a worker writes there.
	if v.fs || v.hasImage(id) {
		if _, err := v.ensureFS(context.Background(), id, p, 0, false); err != nil {
			return "", fmt.Errorf("network volume %s: %w", id, err)
		}
	}
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("network volume %s has no directory %s (EnsureVolume makes it)", id, p)
	case err != nil:
		return "", fmt.Errorf("network volume %s: %w", id, err)
	case !fi.IsDir():
		return "", fmt.Errorf("network volume %s: %s is a %v, not a directory", id, p, fi.Mode().Type())
	}
	return p, nil
}

// Ensure makes the volume's directory if it does not exist (and the root, mode 0700), and
// gives it its owner and permissions. With filesystems, it first makes the volume's
// filesystem if it has none, mounts it if it is not (after a restart or a reboot), and grows
// it online to a larger size (never shrinks it). A plain directory has no size to grow: the
// size is checked by Usage, which Ensure also runs in the background, at most every 10
// minutes a volume, so that a volume over its size is logged while workers use it.
func (v *VolumeDirs) Ensure(ctx context.Context, vol core.Volume) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := v.Path(vol.ID)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(v.root, 0o700); err != nil {
		return fmt.Errorf("network volume %s: creating the volume root: %w", vol.ID, err)
	}
	if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("network volume %s: %w", vol.ID, err)
	}
	if err := assertDir(p); err != nil { // a file or a link where the directory goes
		return fmt.Errorf("network volume %s: %w", vol.ID, err)
	}
	legacy := true
	if v.fs || v.hasImage(vol.ID) {
		var err error
		if legacy, err = v.ensureFS(ctx, vol.ID, p, v.imageSize(vol.SizeGB), v.fs); err != nil {
			return fmt.Errorf("network volume %s: %w", vol.ID, err)
		}
	}
	if v.uid >= 0 || v.gid >= 0 {
		if err := os.Lchown(p, v.uid, v.gid); err != nil {
			return fmt.Errorf("network volume %s: giving its directory to uid %d, gid %d: %w", vol.ID, v.uid, v.gid, err)
		}
	}
	if err := os.Chmod(p, v.mode); err != nil { // not under the umask
		return fmt.Errorf("network volume %s: %w", vol.ID, err)
	}
	v.mu.Lock()
	due := time.Since(v.checked[vol.ID]) >= checkEvery
	if due {
		v.checked[vol.ID] = time.Now()
	}
	v.mu.Unlock()
	if due && vol.SizeGB > 0 && legacy {
		if v.fs {
			v.log.Warn("a network volume holds data from before its pool enforced sizes: it stays a plain directory, whose size is not enforced; copy its data into a new volume to have it enforced",
				"volume", vol.ID, "dir", p)
		}
		go func() { _, _ = v.Usage(context.WithoutCancel(ctx), vol) }()
	}
	return nil
}

// Delete removes the volume's directory and everything in it; a volume that has none is not
// an error. Subdirectories a worker made unwritable are made writable to be removed. A
// volume's filesystem is unmounted (not lazily: one in use on this host is an error) and its
// image removed.
func (v *VolumeDirs) Delete(ctx context.Context, vol core.Volume) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := v.Path(vol.ID)
	if err != nil {
		return err
	}
	if v.fs || v.hasImage(vol.ID) {
		if legacy, err := v.deleteFS(ctx, vol.ID, p); err != nil {
			return fmt.Errorf("network volume %s: %w", vol.ID, err)
		} else if !legacy {
			return nil
		}
	}
	if err := os.RemoveAll(p); err != nil {
		// A worker running as the server's user may have taken the write permission off a
		// directory: give it back (RemoveAll never follows links, nor does WalkDir) and retry.
		_ = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(path, 0o700)
			}
			return nil
		})
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("network volume %s: removing %s: %w", vol.ID, p, err)
		}
	}
	return nil
}

// Usage returns the bytes the volume's directory holds on disk (its files' and directories'
// blocks, a hard-linked file once; links are not followed), 0 for a volume that has none. It
// logs a warning when the volume holds more than its size (GB counted as GiB). A mounted
// filesystem's usage is its used blocks (statfs), with no warning: it cannot hold more.
func (v *VolumeDirs) Usage(ctx context.Context, vol core.Volume) (int64, error) {
	p, err := v.Path(vol.ID)
	if err != nil {
		return 0, err
	}
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if v.fs || v.hasImage(vol.ID) {
		if used, ok, err := usageFS(p); err != nil {
			return 0, fmt.Errorf("network volume %s: %w", vol.ID, err)
		} else if ok {
			return used, nil // the filesystem cannot hold more than its size
		}
	}
	var total int64
	seen := map[[2]uint64]bool{}
	err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while we walked
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			total += fi.Size()
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if seen[key] {
				return nil
			}
			seen[key] = true
		}
		total += st.Blocks * 512
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("network volume %s: measuring %s: %w", vol.ID, p, err)
	}
	if vol.SizeGB > 0 && total > int64(vol.SizeGB)*v.gb {
		v.log.Warn("a network volume holds more than its size: its directory has no quota, so nothing stops it growing; resize the volume or remove files",
			"volume", vol.ID, "sizeGb", vol.SizeGB, "bytes", total, "dir", p)
	}
	return total, nil
}

// LocalVolumes is the pool.VolumeStorage of a pool that keeps its volumes in a VolumeDirs (the
// process and docker pools embed it): each call goes to Dirs or, when the pool keeps none
// (Dirs nil), fails with None, which says how to configure a root.
type LocalVolumes struct {
	Dirs *VolumeDirs
	None error
}

var _ pool.VolumeStorage = LocalVolumes{}

// Volumes returns the pool's volume directories, or None.
func (l LocalVolumes) Volumes() (*VolumeDirs, error) {
	if l.Dirs == nil {
		return nil, l.None
	}
	return l.Dirs, nil
}

// EnsureVolume makes the volume's storage under the root (VolumeDirs.Ensure).
func (l LocalVolumes) EnsureVolume(ctx context.Context, v core.Volume) error {
	d, err := l.Volumes()
	if err != nil {
		return err
	}
	return d.Ensure(ctx, v)
}

// DeleteVolume removes the volume's storage and its data (VolumeDirs.Delete).
func (l LocalVolumes) DeleteVolume(ctx context.Context, v core.Volume) error {
	d, err := l.Volumes()
	if err != nil {
		return err
	}
	return d.Delete(ctx, v)
}

// VolumeUsage returns the bytes the volume holds (VolumeDirs.Usage).
func (l LocalVolumes) VolumeUsage(ctx context.Context, v core.Volume) (int64, error) {
	d, err := l.Volumes()
	if err != nil {
		return -1, err
	}
	return d.Usage(ctx, v)
}
