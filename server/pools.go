package server

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/adapters/docker"
	"github.com/gantryhq/gantry/adapters/process"
	"github.com/gantryhq/gantry/adapters/runpod"
	"github.com/gantryhq/gantry/pool"
)

// poolEnv is what every adapter's builder may use besides its pool's config entry.
type poolEnv struct {
	cfg      *Config
	self     string   // this executable, for built-in workers
	builtins []string // the built-in worker images
	logDir   string   // where pools keep their workers' logs
	log      *slog.Logger
}

// adapter is one kind of pool the config may declare (`adapter: NAME`).
type adapter struct {
	// build makes a pool from its config entry.
	build func(ctx context.Context, env poolEnv, p PoolConfig) (pool.Pool, error)
	// section reports whether p carries this adapter's own config section (nil: it has none).
	section func(p PoolConfig) bool
	// grace is how long p's workers may take to stop when the server shuts down, for adapters
	// whose workers outlive the server (their pools implement shutdowner); nil for the others.
	grace func(p PoolConfig) time.Duration
}

// adapters is the registry of pool adapters by name; a new adapter adds its entry here and
// its section to PoolConfig.
var adapters = map[string]adapter{
	"process": {
		build: func(_ context.Context, env poolEnv, p PoolConfig) (pool.Pool, error) {
			user := workerUser(p.Process, os.Geteuid())
			if os.Geteuid() != 0 { // then no other user is possible: New refuses one
				env.log.Warn("process pool workers run as the server's own user: an endpoint's worker can read the data directory; "+
					"run gantry serve as root (workers then run as process.user, default nobody) to keep them apart",
					"pool", p.ID, "uid", os.Geteuid())
			}
			return process.New(process.Config{Pool: p.PoolInfo, Self: env.self, Builtins: env.builtins,
				Images: env.cfg.Images, LogDir: env.logDir, Devices: env.cfg.devices[p.ID], User: user})
		},
		section: func(p PoolConfig) bool { return p.Process != nil },
	},
	"docker": {
		build: func(ctx context.Context, env poolEnv, p PoolConfig) (pool.Pool, error) {
			d := cmp.Or(p.Docker, &DockerConfig{})
			return docker.New(ctx, docker.Config{Pool: p.PoolInfo, Host: d.Host, Network: d.Network,
				Devices: d.Devices, GPUsByEnv: d.GPUsByEnv, Pull: docker.PullPolicy(d.Pull),
				Credentials: env.cfg.credential, StopGrace: d.StopGrace, Suspend: docker.SuspendMode(d.Suspend),
				LogDir: env.logDir, DiskQuota: d.DiskQuota, Init: d.Init, Log: env.log,
				Timeouts: docker.Timeouts(d.Timeouts)})
		},
		section: func(p PoolConfig) bool { return p.Docker != nil },
		grace: func(p PoolConfig) time.Duration {
			if p.Docker != nil && p.Docker.StopGrace > 0 {
				return p.Docker.StopGrace
			}
			return docker.DefaultStopGrace
		},
	},
	"runpod": {
		build: func(ctx context.Context, env poolEnv, p PoolConfig) (pool.Pool, error) {
			r := p.RunPod
			if r == nil {
				return nil, fmt.Errorf("adapter runpod needs a runpod section (apiKeyEnv, publicUrl)")
			}
			return runpod.New(ctx, runpod.Config{Pool: p.PoolInfo, API: r.API, APIKeyEnv: r.APIKeyEnv, PublicURL: r.PublicURL,
				Cloud: r.Cloud, DataCenters: r.DataCenters, Disk: r.Disk, Registries: r.Registries, Installation: r.Installation,
				MaxPods: r.MaxPods, MaxSpendPerHour: r.MaxSpendPerHour, Poll: r.Poll, CatalogEvery: r.CatalogEvery,
				Stock: r.Stock, Log: env.log})
		},
		section: func(p PoolConfig) bool { return p.RunPod != nil },
		// Shutdown terminates the pool's pods (no rented GPU outlives Gantry): RunPod's
		// terminate answers within seconds, retried on errors.
		grace: func(PoolConfig) time.Duration { return 30 * time.Second },
	},
}

// workerUser is who a process pool's workers run as (process.Config.User) on a server running
// as euid: the configured user; unset, nobody when the server runs as root (uid and gid 65534,
// the usual nobody and nogroup, where the user database has no nobody, as in the scratch
// image), else "" (the server's own user, the only one it can start processes as).
func workerUser(c *ProcessConfig, euid int) string {
	if c != nil && c.User != "" {
		return c.User
	}
	if euid != 0 {
		return ""
	}
	if _, err := user.Lookup("nobody"); err != nil {
		return "65534:65534"
	}
	return "nobody"
}

// adapterNames lists the registered adapters, for messages.
func adapterNames() string { return strings.Join(slices.Sorted(maps.Keys(adapters)), ", ") }

// knownAdapter reports whether name is a registered adapter ("" is process).
func knownAdapter(name string) bool {
	_, ok := adapters[cmp.Or(name, "process")]
	return ok
}

// foreignSection names the adapter whose config section p carries while naming another
// adapter; "" when there is none.
func foreignSection(p PoolConfig) string {
	for _, name := range slices.Sorted(maps.Keys(adapters)) {
		a := adapters[name]
		if a.section != nil && a.section(p) && cmp.Or(p.Adapter, "process") != name {
			return name
		}
	}
	return ""
}

// shutdowner is a pool whose workers outlive the server: Shutdown stops them and waits.
type shutdowner interface {
	Shutdown(ctx context.Context) error
}

// newPools makes the scheduler's pools from the configured (or discovered) catalog pools,
// each with its adapter's builder (a docker pool removes the containers an earlier run left
// on its host). On an error the pools made so far are shut down.
func newPools(ctx context.Context, cfg *Config, self string, builtins []string, log *slog.Logger) (pools []pool.Pool, err error) {
	defer func() {
		if err != nil {
			shutdownPools(cfg, pools, log)
		}
	}()
	env := poolEnv{cfg: cfg, self: self, builtins: builtins, logDir: filepath.Join(cfg.Data, "workers"), log: log}
	for _, p := range cfg.Pools {
		a, ok := adapters[cmp.Or(p.Adapter, "process")]
		if !ok {
			return pools, fmt.Errorf("pool %s: adapter %q is not available in this build (known: %s)", p.ID, p.Adapter, adapterNames())
		}
		pl, err := a.build(ctx, env, p)
		if err != nil {
			return pools, fmt.Errorf("pool %s: %w", p.ID, err)
		}
		pools = append(pools, pl)
	}
	return pools, nil
}

// shutdownPools stops the workers of the pools whose workers outlive the server (containers,
// pods) and waits for them, all pools at once, at most 30 s longer than the longest stop grace;
// then it closes the pools that hold connections (io.Closer: watches, API clients).
func shutdownPools(cfg *Config, pools []pool.Pool, log *slog.Logger) {
	grace := time.Duration(0)
	for _, p := range cfg.Pools {
		if a := adapters[cmp.Or(p.Adapter, "process")]; a.grace != nil {
			grace = max(grace, a.grace(p))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range pools {
		if d, ok := p.(shutdowner); ok {
			wg.Go(func() {
				if err := d.Shutdown(ctx); err != nil {
					log.Error("stopping the workers of a pool", "pool", p.Describe().ID, "err", err)
				}
			})
		}
	}
	wg.Wait()
	for _, p := range pools { // their watches and API clients
		if c, ok := p.(io.Closer); ok {
			if err := c.Close(); err != nil {
				log.Error("closing a pool", "pool", p.Describe().ID, "err", err)
			}
		}
	}
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
