package kit

// This file enforces a local network volume's size (issue 30): where Gantry runs as root and
// may use loop devices, each volume is an ext4 filesystem of its size, kept in a sparse image
// file and loop-mounted at the volume's directory, so that a write past the size fails with
// ENOSPC in the worker.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The ways a VolumeDirs keeps a volume's size, as the pools' volumeSize setting names them.
const (
	// VolumeSizeAuto is VolumeSizeFilesystem where the host allows it, else VolumeSizeReport
	// (NewVolumeDirs logs why). In a test binary it is VolumeSizeReport: a test that dies
	// must not leave loop mounts behind, so tests ask for filesystems by name.
	VolumeSizeAuto = "auto"
	// VolumeSizeFilesystem keeps each volume as an ext4 filesystem of its size: the kernel
	// enforces it. NewVolumeDirs fails where the host does not allow it.
	VolumeSizeFilesystem = "filesystem"
	// VolumeSizeReport keeps each volume as a plain directory: Usage reports the bytes it
	// holds and warns when they are more than its size.
	VolumeSizeReport = "report"
)

// imagesDir is the directory under the root that keeps the volumes' filesystem images. A
// volume id cannot start with '.', so it never names a volume.
const imagesDir = ".images"

// minImage is the smallest filesystem made for a volume: ext4 needs a few MiB.
const minImage = 16 << 20

// fsTools are the programs a filesystem volume needs: mount and umount come from the
// kernel (syscalls); mount's loop option, losetup, mkfs.ext4 and resize2fs do not.
var fsTools = []string{"mount", "losetup", "mkfs.ext4", "resize2fs", "e2fsck", "dumpe2fs"}

// canEnforce returns nil when this process may keep volumes as loop-mounted ext4
// filesystems, or why not.
func canEnforce() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("running as uid %d, not root: no filesystem can be mounted per volume", os.Geteuid())
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return fmt.Errorf("this host has no loop devices (/dev/loop-control: %v)", errors.Unwrap(err))
	}
	if !hasCapSysAdmin() {
		return errors.New("no CAP_SYS_ADMIN: no filesystem can be mounted per volume")
	}
	for _, t := range fsTools {
		if _, err := lookTool(t); err != nil {
			return err
		}
	}
	return nil
}

// lookTool finds a program in $PATH or the system's sbin directories (often not in a
// service's $PATH).
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not installed (util-linux and e2fsprogs provide %s)", name, strings.Join(fsTools, ", "))
}

// hasCapSysAdmin reports whether CAP_SYS_ADMIN is in this process's effective set.
func hasCapSysAdmin() bool { return capable(21) }

// capable reports whether capability number bit is in this process's effective set.
func capable(bit uint) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<bit) != 0
		}
	}
	return false
}

// sharedFS names the filesystems (statfs f_type) that other machines may mount too: an
// ext4 image there would be mounted by every replica naming the root, and corrupted.
var sharedFS = map[int64]string{
	0x6969: "NFS", 0xFF534D42: "CIFS", 0xFE534D42: "SMB2", 0x517B: "SMB", 0x65735546: "FUSE",
	0x00C36400: "Ceph", 0x01021997: "9p", 0x0BD00BD0: "Lustre", 0x47504653: "GPFS",
	0x5346414F: "AFS", 0x6B414653: "AFS",
}

// onSharedFS returns why root (or the nearest directory above it that exists) is on a
// filesystem other machines may mount, or nil.
func onSharedFS(root string) error {
	for d := root; ; d = filepath.Dir(d) {
		var st syscall.Statfs_t
		if err := syscall.Statfs(d, &st); err == nil {
			if name, ok := sharedFS[int64(st.Type)]; ok {
				return fmt.Errorf("the volume root %s is on %s, which other machines may mount: each would mount a volume's filesystem image at once, and corrupt it", root, name)
			}
			return nil
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// resolveSizeMode returns the mode a VolumeDirs under root uses for the setting mode, and
// when auto falls back to report, why.
func resolveSizeMode(mode, root string) (string, error, error) {
	switch mode {
	case "", VolumeSizeAuto:
		if testing.Testing() {
			return VolumeSizeReport, nil, nil
		}
		if why := cmp.Or(canEnforce(), onSharedFS(root)); why != nil {
			return VolumeSizeReport, why, nil
		}
		return VolumeSizeFilesystem, nil, nil
	case VolumeSizeFilesystem:
		if why := cmp.Or(canEnforce(), onSharedFS(root)); why != nil {
			return "", nil, fmt.Errorf("volumeSize %s: %w", mode, why)
		}
		return mode, nil, nil
	case VolumeSizeReport:
		return mode, nil, nil
	}
	return "", nil, fmt.Errorf("volumeSize %q: want %s, %s or %s", mode, VolumeSizeAuto, VolumeSizeFilesystem, VolumeSizeReport)
}

// mountAll mounts every volume's filesystem that is not (after a reboot), so that what an
// operator copies into a volume's directory lands in the volume; it logs what it cannot.
func (v *VolumeDirs) mountAll() {
	imgs, _ := filepath.Glob(filepath.Join(v.root, imagesDir, "*.ext4"))
	for _, img := range imgs {
		id := strings.TrimSuffix(filepath.Base(img), ".ext4")
		p, err := v.Path(id)
		if err == nil {
			_, err = v.ensureFS(context.Background(), id, p, 0, false)
		}
		if err != nil {
			v.log.Warn("a network volume's filesystem could not be mounted at start; its workers fail to start until it can", "image", img, "err", err.Error())
		}
	}
}

// hasImage reports whether volume id is kept as a filesystem: it has an image (made by this
// VolumeDirs, or by one of another size mode on the same root).
func (v *VolumeDirs) hasImage(id string) bool {
	_, err := os.Lstat(v.image(id))
	return err == nil
}

// image returns the path of volume id's filesystem image.
func (v *VolumeDirs) image(id string) string {
	return filepath.Join(v.root, imagesDir, id+".ext4")
}

// lock takes the lock on the volumes' images, between this VolumeDirs's calls and those of
// other servers sharing the root; the returned func releases it.
func (v *VolumeDirs) lock() (func(), error) {
	v.fsMu.Lock()
	dir := filepath.Join(v.root, imagesDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		v.fsMu.Unlock()
		return nil, fmt.Errorf("making %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		v.fsMu.Unlock()
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		v.fsMu.Unlock()
		return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return func() { _ = f.Close(); v.fsMu.Unlock() }, nil
}

// mountSource returns the device mounted at dir in this process's mount namespace ("" when
// nothing is), from /proc/self/mountinfo; the last mount at dir is the one seen.
func mountSource(dir string) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	src := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || UnescapeMount(fields[4]) != dir {
			continue
		}
		src = "?"
		for i, f := range fields {
			if f == "-" && i+2 < len(fields) {
				src = UnescapeMount(fields[i+2])
				break
			}
		}
	}
	return src, sc.Err()
}

// UnescapeMount undoes mountinfo's octal escapes (\040 for a space).
func UnescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// run runs a tool, returning its output in the error when it fails.
func run(ctx context.Context, name string, args ...string) (string, error) {
	p, err := lookTool(name)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(context.WithoutCancel(ctx), p, args...) // never kill a resize midway
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// imageSize returns the bytes of a volume's filesystem for vol's size.
func (v *VolumeDirs) imageSize(sizeGB int) int64 {
	return max(int64(sizeGB)*v.gb, minImage)
}

// ensureFS makes volume id's filesystem of size bytes if it has none and create is true,
// mounts it at p if it is not, and grows it to size bytes if it is smaller (never shrinks
// it). A volume without an image that is not made (create false, or its directory holds data
// from before its pool kept filesystems) stays a plain directory: legacy is true.
func (v *VolumeDirs) ensureFS(ctx context.Context, id, p string, size int64, create bool) (legacy bool, err error) {
	unlock, err := v.lock()
	if err != nil {
		return false, err
	}
	defer unlock()
	img := v.image(id)
	fi, err := os.Stat(img)
	if errors.Is(err, fs.ErrNotExist) {
		if !create {
			return true, nil
		}
		if ents, err := os.ReadDir(p); err == nil && len(ents) > 0 {
			return true, nil
		}
		if err := v.makeImage(ctx, img, size); err != nil {
			return false, err
		}
		fi, err = os.Stat(img)
	}
	if err != nil {
		return false, err
	}
	src, err := mountSource(p)
	if err != nil {
		return false, err
	}
	if src == "" {
		if src, err = v.mountImage(ctx, img, p); err != nil {
			return false, err
		}
	} else if !slices.Contains(loopsBacking(img), src) {
		return false, fmt.Errorf("%s is mounted at %s, not the volume's filesystem %s", src, p, img)
	}
	old := fi.Size()
	if size <= old {
		// A resize cut short (a crash before resize2fs) left the filesystem smaller than its
		// image: finish it, or say why not; the volume works meanwhile.
		if have, err := fsBytes(ctx, src); err == nil && have < old-old/64 {
			if err := v.growFS(ctx, img, p, src); err != nil {
				v.log.Warn("a network volume's filesystem is smaller than its image, and could not grow", "image", img, "err", err.Error())
			}
		}
		return false, nil
	}
	if err := os.Truncate(img, size); err != nil {
		return false, fmt.Errorf("growing %s: %w", img, err)
	}
	if err := v.growFS(ctx, img, p, src); err != nil {
		// The volume keeps its size: give the image back its length if the filesystem did
		// not grow into it (a resize2fs that failed midway may have).
		if src, _ := mountSource(p); src != "" {
			if have, ferr := fsBytes(ctx, src); ferr == nil && have <= old {
				_ = os.Truncate(img, old)
				_, _ = run(ctx, "losetup", "-c", src)
			}
		}
		return false, err
	}
	return false, nil
}

// mountImage mounts img at p. A loop device that still holds img (a worker's mount
// namespace keeps the filesystem after this one unmounted it) is mounted again: a second
// loop device on the same image would be a second, corrupting, mount of the filesystem.
// Else mount -o loop sets one up with autoclear: it goes with the last mount.
func (v *VolumeDirs) mountImage(ctx context.Context, img, p string) (string, error) {
	if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if err := assertDir(p); err != nil {
		return "", err
	}
	var err error
	if devs := loopsBacking(img); len(devs) > 0 {
		_, err = run(ctx, "mount", "-t", "ext4", "-o", "nosuid,nodev", devs[0], p)
	} else {
		_, err = run(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev", img, p)
	}
	if err != nil {
		return "", err
	}
	src, err := mountSource(p)
	if err != nil || src == "" {
		return "", fmt.Errorf("mounted %s at %s, but it is not in /proc/self/mountinfo: %v", img, p, err)
	}
	return src, nil
}

// growFS grows the filesystem on loop device dev, mounted at p, to its image's size: online
// (the loop device told the image's new size, then resize2fs), which needs CAP_SYS_RESOURCE;
// without it, offline, unmounted, when nothing else holds it, else an error saying so.
func (v *VolumeDirs) growFS(ctx context.Context, img, p, dev string) error {
	if _, err := run(ctx, "losetup", "-c", dev); err != nil {
		return err
	}
	_, online := run(ctx, "resize2fs", dev)
	if online == nil {
		return nil
	}
	if err := syscall.Unmount(p, 0); err != nil {
		return fmt.Errorf("%w; and growing it unmounted: unmounting %s: %w (a process on this host uses it)", online, p, err)
	}
	if devs := loopsBacking(img); len(devs) > 0 {
		_, _ = v.mountImage(ctx, img, p)
		return fmt.Errorf("%w; and it cannot grow unmounted while running workers use it: stop them, or give Gantry CAP_SYS_RESOURCE to grow it online", online)
	}
	_, ferr := run(ctx, "e2fsck", "-f", "-p", img)
	var rerr error
	if ferr == nil {
		_, rerr = run(ctx, "resize2fs", img)
	}
	if _, err := v.mountImage(ctx, img, p); err != nil {
		return errors.Join(ferr, rerr, err)
	}
	return errors.Join(ferr, rerr)
}

// fsBytes returns the size of the ext4 filesystem on dev, from its superblock.
func fsBytes(ctx context.Context, dev string) (int64, error) {
	out, err := run(ctx, "dumpe2fs", "-h", dev)
	if err != nil {
		return 0, err
	}
	var count, size int64
	for line := range strings.Lines(out) {
		k, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "Block count":
			count, _ = strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		case "Block size":
			size, _ = strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		}
	}
	if count <= 0 || size <= 0 {
		return 0, fmt.Errorf("dumpe2fs -h %s: no block count and size", dev)
	}
	return count * size, nil
}

// loopsBacking returns the loop devices whose backing file is img.
func loopsBacking(img string) []string {
	var devs []string
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if name := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)"); name == img {
			devs = append(devs, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return devs
}

// assertDir returns why p is not a plain directory (a link, a file), or nil.
func assertDir(p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is a %v, not a directory", p, fi.Mode().Type())
	}
	return nil
}

// makeImage makes a sparse file of size bytes at img and an ext4 filesystem in it, with no
// blocks reserved for root (the workers' user may fill it).
func (v *VolumeDirs) makeImage(ctx context.Context, img string, size int64) error {
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("making %s: %w", img, err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		_, err = run(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", img)
	}
	if err != nil {
		_ = os.Remove(img)
		return fmt.Errorf("making %s: %w", img, err)
	}
	return nil
}

// deleteFS unmounts volume id's filesystem from p, detaches its loop device and removes its
// image; a volume without an image is left to the caller (legacy true). A filesystem in
// use on this host (a shell's working directory in it, an open file) is not unmounted
// lazily: the delete fails saying so, and the data stays until it is retried.
func (v *VolumeDirs) deleteFS(ctx context.Context, id, p string) (legacy bool, err error) {
	unlock, err := v.lock()
	if err != nil {
		return false, err
	}
	defer unlock()
	img := v.image(id)
	if _, err := os.Lstat(img); errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	for {
		src, err := mountSource(p)
		if err != nil {
			return false, err
		}
		if src == "" {
			break
		}
		if err := syscall.Unmount(p, 0); err != nil {
			if errors.Is(err, syscall.EBUSY) {
				return false, fmt.Errorf("unmounting %s: %w: a process on this host uses it (its working directory or an open file); stop it and delete again", p, err)
			}
			return false, fmt.Errorf("unmounting %s: %w", p, err)
		}
	}
	// mount -o loop's devices clear themselves; detach any other left on the image (one
	// still used by a worker's mount namespace is detached when that goes).
	for _, dev := range loopsBacking(img) {
		_, _ = run(ctx, "losetup", "-d", dev)
	}
	if err := os.Remove(img); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := os.RemoveAll(p); err != nil { // unmounted: what is left was never in the volume
		return false, fmt.Errorf("removing %s: %w", p, err)
	}
	return false, nil
}

// usageFS returns the bytes used in volume id's mounted filesystem (its used blocks, as
// statfs counts them), or ok false when it is not mounted.
func usageFS(p string) (used int64, ok bool, err error) {
	src, err := mountSource(p)
	if err != nil || src == "" {
		return 0, false, err
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(p, &st); err != nil {
		return 0, false, err
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, true, nil
}
