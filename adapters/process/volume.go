package process

// This file gives a worker its endpoint's network volume (issue 30): the pool keeps volumes
// as directories under Config.VolumeRoot (kit.VolumeDirs: each a filesystem of its size
// where Config.VolumeSize allows) and, where Gantry runs as root, starts a worker in a
// mount namespace of its own with its volume's directory bound at /runpod-volume, through
// the hidden helper command `gantry __mountns` (MountHelper). Without root the worker finds
// the directory in $GANTRY_VOLUME_PATH instead.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gantryhq/gantry/adapters/kit"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// VolumeEnv names the variable that tells a worker where its network volume is:
// /runpod-volume where the pool mounts it, the volume's directory on the host where it cannot.
// A worker that reads it (and falls back to /runpod-volume) finds its volume on every pool.
const VolumeEnv = "GANTRY_VOLUME_PATH"

// MountHelperArg is the hidden command of the gantry binary that mounts a worker's volume and
// then runs the worker (MountHelper): `gantry __mountns DIR UID GID GROUPS PATH ARGV...`.
const MountHelperArg = "__mountns"

// mountWait bounds how long Start waits for the helper to mount the volume and run the worker.
const mountWait = 30 * time.Second

// exitMountFailed is the helper's exit status when it cannot give the worker its volume or
// run the worker's program.
const exitMountFailed = 125

// VolumeWarning says why the pool's workers do not see their volume at /runpod-volume, ""
// when they do. Workers that run as Gantry's own user find it in $GANTRY_VOLUME_PATH
// instead; workers of another user (a root without the right to unshare) cannot have it, as
// the volume root is Gantry's alone: they fail to start, as the warning says.
func (p *Pool) VolumeWarning() string {
	err := p.namespaces()
	switch {
	case err == nil:
		return ""
	case p.cmds.user != nil:
		return fmt.Sprintf("pool %s (process) cannot mount network volumes at %s: %v; its workers run as %s, who may not reach the volume root, so workers with a volume fail to start",
			p.desc.ID, core.VolumeMountPath, err, p.cmds.user)
	}
	return fmt.Sprintf("pool %s (process) cannot mount network volumes at %s: %v; its workers find their volume's directory in $%s instead, and run as Gantry's own user",
		p.desc.ID, core.VolumeMountPath, err, VolumeEnv)
}

// namespaces returns nil when the pool can give workers mount namespaces of their own, else
// why not. It finds out once.
func (p *Pool) namespaces() error {
	p.nsOnce.Do(func() { p.nsErr = probeNamespaces() })
	return p.nsErr
}

// probeNamespaces finds out whether this process may give a child a mount namespace of its
// own: it must run as root, and be allowed to unshare (a container without CAP_SYS_ADMIN is
// not). The probe child unshares, makes its mounts private (as Go does with CLONE_NEWNS),
// then executes a directory, which fails with EACCES: any other error came from before.
func probeNamespaces() error {
	if euid := os.Geteuid(); euid != 0 {
		return fmt.Errorf("not running as root (uid %d)", euid)
	}
	pid, err := syscall.ForkExec("/", []string{"gantry-mountns-probe"}, &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS},
	})
	if err == nil { // cannot happen: "/" is no program
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
		return nil
	}
	if errors.Is(err, syscall.EACCES) {
		return nil
	}
	return fmt.Errorf("it may not give a process a mount namespace of its own (%v: run it with CAP_SYS_ADMIN)", err)
}

// volumeMount is a started worker's helper's report channel: it says why the volume could
// not be mounted, or closes with nothing once the worker's program runs.
type volumeMount struct {
	r, w *os.File
	vol  core.Volume
}

// attachVolume changes a worker's prepared command so that the worker sees vol: where the pool
// has namespaces, the command runs the mount helper as root, which mounts the volume and then
// runs the worker's program as the worker's user; elsewhere a worker running as the server's
// user learns the volume's directory from VolumeEnv, and one of another user fails to start.
// A volume without its directory fails the start.
func (p *Pool) attachVolume(cmd *exec.Cmd, vol core.Volume) (*volumeMount, error) {
	d, err := p.Volumes()
	if err != nil {
		return nil, err
	}
	dir, err := d.Dir(vol.ID)
	if err != nil {
		return nil, err
	}
	if cmd.Err != nil { // the program was not found: cmd.Start says so, as without a volume
		return nil, nil
	}
	if err := p.namespaces(); err != nil {
		if u := p.cmds.user; u != nil { // it cannot search the root, nor should it: every worker is u
			return nil, fmt.Errorf("network volume %s: this pool cannot mount it at %s: %v; and its workers' user %s may not reach the volume root",
				vol.ID, core.VolumeMountPath, err, u)
		}
		cmd.Env = append(cmd.Env, VolumeEnv+"="+dir)
		return nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	uid, gid, groups := "-", "-", ""
	if u := p.cmds.user; u != nil {
		uid, gid = strconv.FormatUint(uint64(u.uid), 10), strconv.FormatUint(uint64(u.gid), 10)
		gs := make([]string, len(u.groups))
		for i, g := range u.groups {
			gs[i] = strconv.FormatUint(uint64(g), 10)
		}
		groups = strings.Join(gs, ",")
	}
	helper := p.cmds.self
	if helper == "" {
		helper = thisBinary
	}
	args := append([]string{"gantry", MountHelperArg, dir, uid, gid, groups, cmd.Path}, cmd.Args...)
	cmd.Path, cmd.Args = helper, args
	cmd.Env = append(cmd.Env, VolumeEnv+"="+core.VolumeMountPath)
	cmd.ExtraFiles = []*os.File{w} // fd 3 of the helper
	cmd.SysProcAttr.Credential = nil
	cmd.SysProcAttr.Unshareflags = syscall.CLONE_NEWNS
	return &volumeMount{r: r, w: w, vol: vol}, nil
}

// wait waits for the helper's report, after cmd.Start returned startErr: nil once the
// worker's program runs, else why the worker cannot run (its process is reaped).
func (m *volumeMount) wait(cmd *exec.Cmd, startErr error) error {
	_ = m.w.Close()
	defer func() { _ = m.r.Close() }()
	if startErr != nil {
		return startErr
	}
	_ = m.r.SetReadDeadline(time.Now().Add(mountWait))
	msg, err := io.ReadAll(m.r)
	switch {
	case err == nil && len(msg) == 0:
		return nil
	case err == nil:
		_ = cmd.Wait()
		return fmt.Errorf("network volume %s: %s", m.vol.ID, msg)
	default:
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return fmt.Errorf("network volume %s: the mount helper (%s %s) did not run the worker within %v: %v (is %s a gantry binary?)",
			m.vol.ID, cmd.Path, MountHelperArg, mountWait, err, cmd.Path)
	}
}

// MountHelper is `gantry __mountns DIR UID GID GROUPS PATH ARGV...`, which the process pool
// runs as root in a new mount namespace for a worker that has a network volume: it makes
// every mount private to the namespace, bind-mounts DIR read-write at /runpod-volume (nosuid,
// nodev; the empty directory /runpod-volume is made on the host if missing), switches to the
// worker's user (UID and GID, "-" to stay; GROUPS its supplementary groups, comma-separated)
// and executes PATH with ARGV and its own environment. On failure it writes why to fd 3 and
// to stderr, and exits with status 125; the worker's program never runs. It never returns.
func MountHelper(args []string) {
	status := os.NewFile(3, "mount status")
	fail := func(err error) {
		if status != nil {
			_, _ = status.WriteString(err.Error())
		}
		fmt.Fprintf(os.Stderr, "gantry %s: %v\n", MountHelperArg, err)
		os.Exit(exitMountFailed)
	}
	if len(args) < 6 {
		fail(fmt.Errorf("usage: gantry %s DIR UID GID GROUPS PATH ARGV0 [ARG]", MountHelperArg))
	}
	dir, uid, gid, groups, path, argv := args[0], args[1], args[2], args[3], args[4], args[5:]
	syscall.CloseOnExec(3) // the worker does not inherit it: its closing says it runs
	parent := os.Getppid()
	if err := mountVolume(dir); err != nil {
		fail(fmt.Errorf("mounting it at %s: %w", core.VolumeMountPath, err))
	}
	if err := dropTo(uid, gid, groups); err != nil {
		fail(fmt.Errorf("mounted, but %w", err))
	}
	// A change of user clears the parent-death signal the pool asked for: ask again, then
	// make sure the server did not die in between.
	const prSetPdeathsig = 1
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetPdeathsig, uintptr(syscall.SIGKILL), 0); e != 0 {
		fail(fmt.Errorf("mounted, but setting the parent-death signal: %v", e))
	}
	if os.Getppid() != parent {
		os.Exit(exitMountFailed)
	}
	err := syscall.Exec(path, argv, os.Environ())
	who := ""
	if uid != "-" {
		who = " as uid " + uid
	}
	fail(fmt.Errorf("mounted, but running %s%s: %w", path, who, err))
}

// mountVolume makes the mount namespace's mounts private, then binds dir at /runpod-volume.
func mountVolume(dir string) error {
	if err := syscall.Mount("none", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the worker's mounts private: %w", err)
	}
	if err := os.Mkdir(core.VolumeMountPath, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating the mount point on the host: %w", err)
	}
	if err := syscall.Mount(dir, core.VolumeMountPath, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s there: %w", dir, err)
	}
	const flags = syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_NOSUID | syscall.MS_NODEV
	if err := syscall.Mount("none", core.VolumeMountPath, "", flags, ""); err != nil {
		return fmt.Errorf("making it nosuid,nodev: %w", err)
	}
	detachVolumes(filepath.Dir(dir))
	return nil
}

// detachVolumes lets go, in the worker's mount namespace, of the volume filesystems mounted
// under root (copies of the host's mounts, kit.VolumeDirs), /runpod-volume staying: a worker
// holds no other volume, whose loop device must go when the volume is deleted or unmounted
// to grow. Best effort: a mount left only delays that.
func detachVolumes(root string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if mp := kit.UnescapeMount(f[4]); filepath.Dir(mp) == root {
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	}
}

// dropTo switches the process to the worker's user: its supplementary groups, its group, its
// user; "-" stays.
func dropTo(uid, gid, groups string) error {
	if uid == "-" {
		return nil
	}
	u, err1 := strconv.Atoi(uid)
	g, err2 := strconv.Atoi(gid)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("the worker's user is %s:%s: %w", uid, gid, err)
	}
	var gs []int
	for _, s := range strings.Split(groups, ",") {
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("the worker's groups are %q: %w", groups, err)
		}
		gs = append(gs, n)
	}
	if err := syscall.Setgroups(gs); err != nil {
		return fmt.Errorf("setting the worker's groups: %w", err)
	}
	if err := syscall.Setgid(g); err != nil {
		return fmt.Errorf("switching to group %d: %w", g, err)
	}
	if err := syscall.Setuid(u); err != nil {
		return fmt.Errorf("switching to uid %d: %w", u, err)
	}
	return nil
}

var (
	_ pool.VolumeStorage                  = (*Pool)(nil)
	_ interface{ VolumeWarning() string } = (*Pool)(nil)
)
