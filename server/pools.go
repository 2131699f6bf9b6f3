package server

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/adapters/docker"
	"github.com/gantryhq/gantry/adapters/kit"
	kube "github.com/gantryhq/gantry/adapters/kubernetes"
	"github.com/gantryhq/gantry/adapters/process"
	"github.com/gantryhq/gantry/adapters/runpod"
	"github.com/gantryhq/gantry/pool"
)

// adapters is the registry of pool adapters, one line each: the adapter package's
// kit.Adapter and the PoolConfig field that holds its section. A new adapter adds its line
// here and its section to PoolConfig.
var adapters = []adapter{
	register(process.Adapter, func(p *PoolConfig) *process.Config { return p.Process }),
	register(docker.Adapter, func(p *PoolConfig) *docker.Config { return p.Docker }),
	register(runpod.Adapter, func(p *PoolConfig) *runpod.Config { return p.RunPod }),
	register(kube.Adapter, func(p *PoolConfig) *kube.Config { return p.Kubernetes }),
}

// adapter is one kind of pool the config may declare (`adapter: NAME`), its kit.Adapter
// bound to its section of PoolConfig.
type adapter struct {
	name string
	// validate checks p's section (kit.Adapter.Validate; nil error when it has none).
	validate func(p *PoolConfig) error
	// build makes a pool from its config entry.
	build func(ctx context.Context, env kit.Env, p PoolConfig) (pool.Pool, error)
	// section reports whether p carries this adapter's config section.
	section func(p PoolConfig) bool
	// grace is how long p's workers may take to stop when the server shuts down, for adapters
	// whose workers outlive the server (their pools implement shutdowner); nil for the others.
	grace func(p PoolConfig) time.Duration
}

// register binds a to its section, the PoolConfig field of returns.
func register[C any](a kit.Adapter[C], of func(p *PoolConfig) *C) adapter {
	e := adapter{
		name: a.Name,
		validate: func(p *PoolConfig) error {
			if a.Validate == nil {
				return nil
			}
			return a.Validate(of(p))
		},
		build: func(ctx context.Context, env kit.Env, p PoolConfig) (pool.Pool, error) {
			return a.Build(ctx, env, p.PoolInfo, of(&p))
		},
		section: func(p PoolConfig) bool { return of(&p) != nil },
	}
	if a.Grace != nil {
		e.grace = func(p PoolConfig) time.Duration { return a.Grace(of(&p)) }
	}
	return e
}

// adapterOf returns the registered adapter with a name ("" is process); ok is false when
// there is none.
func adapterOf(name string) (a adapter, ok bool) {
	name = cmp.Or(name, "process")
	for _, a := range adapters {
		if a.name == name {
			return a, true
		}
	}
	return adapter{}, false
}

// adapterNames lists the registered adapters, for messages.
func adapterNames() string {
	var names []string
	for _, a := range adapters {
		names = append(names, a.name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// knownAdapter reports whether name is a registered adapter ("" is process).
func knownAdapter(name string) bool {
	_, ok := adapterOf(name)
	return ok
}

// foreignSection names the adapter whose config section p carries while naming another
// adapter (the first by name); "" when there is none.
func foreignSection(p PoolConfig) string {
	var names []string
	for _, a := range adapters {
		if a.section(p) && cmp.Or(p.Adapter, "process") != a.name {
			names = append(names, a.name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
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
	for _, p := range cfg.Pools {
		a, ok := adapterOf(p.Adapter)
		if !ok {
			return pools, fmt.Errorf("pool %s: adapter %q is not available in this build (known: %s)", p.ID, p.Adapter, adapterNames())
		}
		env := kit.Env{Self: self, Builtins: builtins, Images: cfg.Images, LogDir: filepath.Join(cfg.Data, "workers"), Log: log,
			VolumeRoot: filepath.Join(cfg.Data, volumesDir),
			PublicURL:  cfg.PublicURL, Devices: cfg.devices[p.ID], Credential: cfg.credential}
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
		if a, _ := adapterOf(p.Adapter); a.grace != nil {
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

// credential returns the configured registry credential with an id (kit.Env.Credential).
func (c *Config) credential(_ context.Context, id string) (kit.Credential, error) {
	for _, r := range c.Registries {
		if r.ID != id {
			continue
		}
		password := r.Password
		if r.PasswordEnv != "" {
			password = os.Getenv(r.PasswordEnv)
			if password == "" {
				return kit.Credential{}, fmt.Errorf("registry %q: $%s is empty", id, r.PasswordEnv)
			}
		}
		return kit.Credential{Username: r.Username, Password: password, Server: r.Server}, nil
	}
	return kit.Credential{}, fmt.Errorf("no registry %q in the config file's registries", id)
}
