package docker

// This file gives a worker its endpoint's network volume (issue 30): the pool keeps volumes
// as directories under Config.VolumeRoot (kit.VolumeDirs: each a filesystem of its size
// where Config.VolumeSize allows), a path on the Docker host, and bind-mounts a worker's
// volume at /runpod-volume in its container, read-write.

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/gantryhq/gantry/adapters/kit"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// VolumeEnv names the variable that tells a worker where its network volume is mounted
// (/runpod-volume), as the process pool sets it.
const VolumeEnv = "GANTRY_VOLUME_PATH"

// newVolumeDirs returns the volumes kept under root, nil when root is "". A volume's
// directory is mode 0777: a container may run as any user (most run as root), and the root
// (0700) keeps the host's other users out.
func newVolumeDirs(root string, cfg Config) (*kit.VolumeDirs, error) {
	if root == "" {
		return nil, nil
	}
	mode := cfg.VolumeSize
	if mode == "" || mode == kit.VolumeSizeAuto {
		if why := engineSeesMounts(cfg.Host); why != nil {
			log := cmp.Or(cfg.Log, slog.Default())
			log.Warn("network volumes' sizes are not enforced: each volume is a plain directory, whose bytes are measured and warned of past its size; volumeSize auto mounts a filesystem of its size per volume only where the Docker engine sees Gantry's mounts",
				"root", root, "why", why.Error())
			mode = kit.VolumeSizeReport
		}
	}
	return kit.NewVolumeDirs(root, -1, -1, 0o777, mode, cfg.Log)
}

// engineSeesMounts returns nil when the Docker engine at host runs in Gantry's own mount
// namespace, so that it binds a volume's mounted filesystem and not the empty directory
// under it; else why not (a remote engine, Gantry in a container of its own). It asks the
// kernel which process serves the engine's socket (SO_PEERCRED).
func engineSeesMounts(host string) error {
	h := cmp.Or(host, os.Getenv("DOCKER_HOST"), "unix:///var/run/docker.sock")
	path, ok := strings.CutPrefix(h, "unix://")
	if !ok {
		return fmt.Errorf("the Docker engine at %s is not local", h)
	}
	conn, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return fmt.Errorf("the Docker engine at %s: %w", h, err)
	}
	defer func() { _ = conn.Close() }()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	cerr := raw.Control(func(fd uintptr) {
		cred, err = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if err = cmp.Or(cerr, err); err != nil {
		return fmt.Errorf("the Docker engine at %s: which process serves it: %w", h, err)
	}
	if cred.Pid <= 0 {
		return fmt.Errorf("the Docker engine at %s runs outside Gantry's process namespace (is Gantry in a container?)", h)
	}
	mine, err1 := os.Readlink("/proc/self/ns/mnt")
	its, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", cred.Pid))
	if err := cmp.Or(err1, err2); err != nil {
		return fmt.Errorf("the Docker engine at %s: comparing mount namespaces: %w", h, err)
	}
	if mine != its {
		return fmt.Errorf("the Docker engine at %s (pid %d) runs in another mount namespace than Gantry: it would not see the volumes' mounts", h, cred.Pid)
	}
	return nil
}

// volumeSource returns the directory to bind at /runpod-volume for vol, "" for none, or why
// the worker cannot have it (the pool keeps no volumes, the directory was never made).
func (p *Pool) volumeSource(vol *core.Volume) (string, error) {
	if vol == nil {
		return "", nil
	}
	d, err := p.Volumes()
	if err != nil {
		return "", err
	}
	return d.Dir(vol.ID)
}

// withVolume adds the bind mount of dir at /runpod-volume, read-write, to a container's
// options, and VolumeEnv to its environment; dir "" adds nothing.
func withVolume(opts *client.ContainerCreateOptions, dir string) {
	if dir == "" {
		return
	}
	opts.HostConfig.Mounts = append(opts.HostConfig.Mounts, mount.Mount{Type: mount.TypeBind, Source: dir, Target: core.VolumeMountPath})
	opts.Config.Env = append(opts.Config.Env, VolumeEnv+"="+core.VolumeMountPath)
}

var _ pool.VolumeStorage = (*Pool)(nil)
