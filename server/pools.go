package server

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gantryhq/gantry/adapters/docker"
	"github.com/gantryhq/gantry/adapters/process"
	"github.com/gantryhq/gantry/scheduler"
)

// newPools makes the scheduler's pools from the configured (or discovered) catalog pools: the
// process adapter's, and the docker adapter's (New removes the containers an earlier run left
// on their hosts). Docker pools pull private images with the credential an endpoint's
// registry names, from the config's registries. On an error the pools made so far are shut
// down.
func newPools(ctx context.Context, cfg *Config, self string, builtins []string, log *slog.Logger) (pools []scheduler.Pool, err error) {
	defer func() {
		if err != nil {
			shutdownPools(cfg, pools, log)
		}
	}()
	logDir := filepath.Join(cfg.Data, "workers")
	for _, p := range cfg.Pools {
		switch p.Adapter {
		case "", "process":
			pool, err := process.New(process.Config{Pool: p.Pool, Self: self, Builtins: builtins,
				Images: cfg.Images, LogDir: logDir, Devices: cfg.devices[p.ID]})
			if err != nil {
				return pools, fmt.Errorf("pool %s: %w", p.ID, err)
			}
			pools = append(pools, pool)
		case "docker":
			d := cmp.Or(p.Docker, &DockerConfig{})
			pool, err := docker.New(ctx, docker.Config{Pool: p.Pool, Host: d.Host, Network: d.Network,
				Devices: d.Devices, GPUsByEnv: d.GPUsByEnv, Pull: docker.PullPolicy(d.Pull),
				Credentials: cfg.credential, StopGrace: d.StopGrace, Suspend: docker.SuspendMode(d.Suspend),
				LogDir: logDir, DiskQuota: d.DiskQuota, Init: d.Init, Log: log})
			if err != nil {
				return pools, fmt.Errorf("pool %s: %w", p.ID, err)
			}
			pools = append(pools, pool)
		default:
			return pools, fmt.Errorf("pool %s: adapter %q is not available in this build (known: process, docker)", p.ID, p.Adapter)
		}
	}
	return pools, nil
}

// shutdownPools stops the workers of the pools whose workers outlive the server (containers)
// and waits for them, all pools at once, at most 30 s longer than the longest stop grace.
func shutdownPools(cfg *Config, pools []scheduler.Pool, log *slog.Logger) {
	grace := docker.DefaultStopGrace
	for _, p := range cfg.Pools {
		if p.Docker != nil {
			grace = max(grace, p.Docker.StopGrace)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range pools {
		if d, ok := p.(*docker.Pool); ok {
			wg.Go(func() {
				if err := d.Shutdown(ctx); err != nil {
					log.Error("stopping the workers of a docker pool", "pool", d.Describe().ID, "err", err)
				}
			})
		}
	}
	wg.Wait()
}

// credential returns the configured registry credential with an id.
func (c *Config) credential(_ context.Context, id string) (docker.Credential, error) {
	for _, r := range c.Registries {
		if r.ID != id {
			continue
		}
		password := r.Password
		if r.PasswordEnv != "" {
			password = os.Getenv(r.PasswordEnv)
			if password == "" {
				return docker.Credential{}, fmt.Errorf("registry %q: $%s is empty", id, r.PasswordEnv)
			}
		}
		return docker.Credential{Username: r.Username, Password: password, ServerAddress: r.Server}, nil
	}
	return docker.Credential{}, fmt.Errorf("no registry %q in the config file's registries", id)
}
