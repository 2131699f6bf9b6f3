package docker

// This file gives a worker its endpoint's network volume (issue 30): the pool keeps volumes
// as directories under Config.VolumeRoot (kit.VolumeDirs: each a filesystem of its size
// where Config.VolumeSize allows), a path on the Docker host, and bind-mounts a worker's
// volume at /runpod-volume in its container, read-write.

import (
	"context"
	"fmt"

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
	return kit.NewVolumeDirs(root, -1, -1, 0o777, cfg.VolumeSize, cfg.Log)
}

// volumeDirs returns the pool's volume storage, or why it has none.
func (p *Pool) volumeDirs() (*kit.VolumeDirs, error) {
	if p.volumes == nil {
		return nil, fmt.Errorf("docker pool %s keeps no network volumes: set its docker.volumeRoot to a directory that has the same path on the Docker host (%s) and where Gantry runs", p.desc.ID, p.host)
	}
	return p.volumes, nil
}

// EnsureVolume makes the volume's directory under the pool's volume root (mode 0777). It
// implements pool.VolumeStorage.
func (p *Pool) EnsureVolume(ctx context.Context, v core.Volume) error {
	d, err := p.volumeDirs()
	if err != nil {
		return err
	}
	return d.Ensure(ctx, v)
}

// DeleteVolume removes the volume's directory and its data.
func (p *Pool) DeleteVolume(ctx context.Context, v core.Volume) error {
	d, err := p.volumeDirs()
	if err != nil {
		return err
	}
	return d.Delete(ctx, v)
}

// VolumeUsage returns the bytes the volume holds: its filesystem's used blocks, or, for a
// plain directory (volumeSize report), its blocks, with a warning when they are more than
// its size.
func (p *Pool) VolumeUsage(ctx context.Context, v core.Volume) (int64, error) {
	d, err := p.volumeDirs()
	if err != nil {
		return -1, err
	}
	return d.Usage(ctx, v)
}

// volumeSource returns the directory to bind at /runpod-volume for vol, "" for none, or why
// the worker cannot have it (the pool keeps no volumes, the directory was never made).
func (p *Pool) volumeSource(vol *core.Volume) (string, error) {
	if vol == nil {
		return "", nil
	}
	d, err := p.volumeDirs()
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
