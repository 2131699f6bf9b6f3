// Package docker is Gantry's Docker adapter: a pool.Pool that runs each worker as a
// container on one Docker host, through the Docker Engine API (the moby client that
// testcontainers-go uses; the API version is negotiated, so Engine 20.10, API 1.41, works).
//
// A pool is one Docker host with a fixed capacity (its GPUs, or CPU slots): the scheduler
// reserves device indices, and the pool hands a worker's devices to its container through a
// device request of the "nvidia" driver. Containers are labelled as Gantry's (LabelManaged,
// LabelPool, LabelWorker, LabelEndpoint) so that a restarted Gantry finds and removes what an
// earlier run left behind (New does).
package docker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/gantryhq/gantry/adapters/kit"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// DefaultStopGrace is how long Stop waits after the stop signal before SIGKILL when
// Config.StopGrace is 0.
const DefaultStopGrace = 10 * time.Second

// Labels every container of a pool carries.
const (
	LabelManaged  = "gantry.managed"  // "true": a Gantry worker
	LabelPool     = "gantry.pool"     // the pool's id
	LabelWorker   = "gantry.worker"   // the worker's id
	LabelEndpoint = "gantry.endpoint" // the endpoint the worker serves
)

// SuspendMode is what Suspend does to a worker's container.
type SuspendMode string

// Suspend modes. SuspendPause is the default: measured on Engine 20.10 with BenchmarkColdStart,
// a paused worker answers HTTP again about 15-20 ms after Resume, a stopped one 105-115 ms after
// it (a fresh container: 130 ms), and a paused worker keeps what it loaded (a model in memory,
// which a restarted one loads again).
const (
	// SuspendPause freezes the container's processes (the cgroup freezer): they keep their
	// memory and devices and use no CPU; Resume thaws them.
	SuspendPause SuspendMode = "pause"
	// SuspendStop stops the container as Stop would (the stop signal, SIGKILL after the
	// grace) but keeps it; Resume starts the same container again: the worker starts from
	// scratch, with the same environment and ports. It frees the worker's memory meanwhile.
	SuspendStop SuspendMode = "stop"
)

// PullPolicy says when Start pulls a worker's image.
type PullPolicy string

// Pull policies.
const (
	PullMissing PullPolicy = "missing" // pull an image that is not on the host (the default)
	PullNever   PullPolicy = "never"   // never pull: images must be on the host already
)

// Credential is what a registry needs to let the Docker host pull a private image.
type Credential struct {
	Username      string
	Password      string // or a token
	ServerAddress string // the registry, e.g. "ghcr.io"; "" = the image's registry
}

// Config configures a Pool. It is also a docker pool's section in the config file
// (pools[].docker, all optional): the fields with a yaml key are read from there, and Build
// fills in the others from the pool's description and the server. New validates it once.
type Config struct {
	// Pool describes the pool as the catalog shows it: ID and GPUType are required, GPUs (the
	// number of GPUs, or of CPU slots when CPU is set) must be > 0, CUDAVersions are
	// "major.minor" values (New sorts them and drops repeats). Adapter defaults to "docker".
	Pool core.PoolInfo `yaml:"-"`
	// Host is the Docker Engine API address: "unix:///var/run/docker.sock" or
	// "tcp://host:2376". "" = $DOCKER_HOST, else unix:///var/run/docker.sock. With
	// $DOCKER_CERT_PATH set, the client speaks TLS with the ca.pem, cert.pem and key.pem there.
	Host string `yaml:"host"`
	// Network is the network mode of the workers' containers: "" or "host" (the only mode
	// supported now). Workers share the host's network: each port variable of a spec's PortEnv
	// gets a free port of the host, as with the process pool, and Gantry reaches it on
	// 127.0.0.1. (Other modes need workers to reach Gantry off loopback; not yet.)
	Network string `yaml:"network"`
	// Devices names the host's GPUs behind the pool's device indices as the NVIDIA runtime
	// accepts them (GPU UUIDs, or the host's indices): device i of the pool is Devices[i].
	// nil = the indices themselves. Not used on CPU pools.
	Devices []string `yaml:"devices"`
	// GPUsByEnv hands GPUs to workers through NVIDIA_VISIBLE_DEVICES only, for hosts whose
	// default runtime is nvidia (the nvidia-docker2 setup). false (the default) makes a device
	// request of the "nvidia" driver with the worker's device names, which needs the NVIDIA
	// Container Toolkit; the runtime then sets NVIDIA_VISIBLE_DEVICES in the container, whose
	// GPUs are numbered from 0 (so CUDA_VISIBLE_DEVICES is left alone). Either way a worker on
	// a GPU pool given no GPUs gets NVIDIA_VISIBLE_DEVICES=void.
	GPUsByEnv bool `yaml:"gpusByEnv"`
	// Pull says when Start pulls an image; "" = PullMissing. A failed pull fails the Start
	// ("image X is not on this Docker host and could not be pulled: ...").
	Pull PullPolicy `yaml:"pull"`
	// Credentials returns the stored registry credential with an id: a spec's Registry (the
	// endpoint's `registry` field) names one for pulling its image. nil = no credentials are
	// stored, and a spec that names one fails to start with an error saying so.
	Credentials func(ctx context.Context, id string) (Credential, error) `yaml:"-"`
	// StopGrace is how long Stop (and Suspend with SuspendStop) waits after the stop signal
	// before SIGKILL; 0 = DefaultStopGrace (10 s). The Engine API counts whole seconds: it is
	// rounded up.
	StopGrace time.Duration `yaml:"stopGrace"`
	// Suspend is what Suspend does: "" = SuspendPause.
	Suspend SuspendMode `yaml:"suspend"`
	// LogDir is where a worker's log (stdout and stderr) is saved, to LogDir/<worker id>.log,
	// when its container is removed; Logs reads it afterwards. The directory is created (mode
	// 0700). "" = a worker's log lives only as long as its container. While the container
	// exists its log is the engine's (json-file, at most 3 files of 10 MB).
	LogDir string `yaml:"-"`
	// DiskQuota makes a spec's Disk (GB) the container's writable-layer size (the storage
	// option "size"), which only some storage drivers support (overlay2 on xfs with pquota,
	// btrfs, zfs, devicemapper); a Start on another fails. false (the default): Disk is
	// advisory.
	DiskQuota bool `yaml:"diskQuota"`
	// Init runs the engine's init (docker-init, tini) as each container's PID 1, so that a
	// worker that installs no signal handler (a plain Python handler) still dies on the stop
	// signal instead of waiting out the grace.
	Init bool `yaml:"init"`
	// Timeouts bound each kind of call to the engine, so that a wedged dockerd fails the call
	// with an error naming it instead of holding the scheduler; the zero value takes the
	// defaults (Default*Timeout).
	Timeouts Timeouts `yaml:"timeouts"`
	// Log receives what the pool does outside its events: leftover containers it removed,
	// failures it could only log. nil = slog.Default().
	Log *slog.Logger `yaml:"-"`
	// VolumeRoot is the directory that keeps the network volumes the pool stores, one
	// directory each (<VolumeRoot>/<volume id>), bind-mounted at /runpod-volume in the
	// containers of workers that have one. It must have the same path on the Docker host (the
	// engine mounts it) and where Gantry runs (Gantry makes and removes the directories): a
	// local engine, or a shared filesystem mounted at the same path. "" = the pool keeps none.
	VolumeRoot string `yaml:"volumeRoot"`
	// VolumeSize says how a volume's size is kept (kit.VolumeDirs): "filesystem" makes each
	// volume an ext4 filesystem of its size on a loop device (root, CAP_SYS_ADMIN, loop
	// devices, e2fsprogs), so a write past it fails with ENOSPC; "report" keeps a plain
	// directory and warns when it holds more; "auto" (or "") is filesystem where it can be,
	// else report with a warning at start saying why.
	VolumeSize string `yaml:"volumeSize"`
}

// Pool is the Docker adapter's pool.Pool: one Docker host. Start pulls the spec's image
// when the host lacks it (with the endpoint's registry credential), then creates and starts a
// container named gantry-<pool>-<worker> from it: the image's entrypoint with the spec's Args
// (split at spaces) as its command, the spec's env with the port variables and the device
// variables over it, the pool's labels, host networking, the devices as a device request, and
// a bounded json-file log. The pool watches each container (ContainerWait) and reports
// WorkerExited once, when it exits, after freeing the worker's devices, saving its log and
// removing the container; a crash's error names the exit status (an *ExitError) and quotes
// the last lines of output.
//
// Stop stops the container (the image's stop signal, SIGTERM by default, then SIGKILL after
// StopGrace) and removes it. FLASHBOOT keeps retired workers: with SuspendPause (the default)
// Suspend pauses the container and Resume unpauses it; with SuspendStop Suspend stops the
// container but keeps it, and Resume starts it again (same ports, same environment). Neither
// counts as an exit. A suspended container is removed only when Stop is called on it.
//
// Workers share the host's network: each variable of a spec's PortEnv gets a free port of the
// host (the WorkerRunning event's Addrs say 127.0.0.1:port, and the port stays the same across
// a suspend), while a spec's Ports need nothing more (a worker listening on 22 listens on the
// host's 22). Logs reads a worker's output; Shutdown stops every worker as Gantry exits. A
// worker whose spec has a Volume gets its directory under Config.VolumeRoot bind-mounted at
// /runpod-volume, read-write (volume.go).
//
// The pool accounts for the device indices (or CPU slot indices) of its workers as the process
// pool does: Start refuses a spec that asks for more than the pool has, for an index out of
// range, twice, or held by a live worker, with an error wrapping pool.ErrNoCapacity. A
// worker's indices are free again before its WorkerExited event is sent.
type Pool struct {
	desc     core.PoolInfo
	api      *client.Client
	host     string
	grace    time.Duration
	timeouts Timeouts // with the defaults filled in
	suspend  SuspendMode
	pull     PullPolicy
	devices  []string // machine device names by pool index; nil = the index
	cfg      Config   // the rest: Network, GPUsByEnv, Credentials, LogDir, DiskQuota, Init
	log      *slog.Logger

	live             *kit.Live[*worker] // live workers and the devices they hold
	kit.LocalVolumes                    // the network volumes it keeps (pool.VolumeStorage)
}

// idleConnTimeout is how long the pool keeps an idle connection to the engine. The pool's
// calls come in bursts (a start, a stop); short-lived idle connections keep the goroutines
// the pool starts bounded in time once its workers have exited.
const idleConnTimeout = time.Second

// New returns a pool on the Docker host cfg names, or what is wrong with cfg, or why the
// engine does not answer. It removes the containers an earlier run of Gantry left on the host
// for this pool (labelled with its id): their workers' tokens died with that server, so they
// cannot be adopted. It logs each removal; a leftover's log is saved to LogDir first.
func New(ctx context.Context, cfg Config) (*Pool, error) {
	d, errs := kit.CheckPool(cfg.Pool, "docker", cfg.Devices, cfg.StopGrace)
	if cfg.Network != "" && cfg.Network != "host" {
		errs = append(errs, fmt.Errorf("network %q: only host networking is supported", cfg.Network))
	}
	suspend := cmp.Or(cfg.Suspend, SuspendPause)
	if suspend != SuspendPause && suspend != SuspendStop {
		errs = append(errs, fmt.Errorf("suspend mode %q; want %q or %q", cfg.Suspend, SuspendPause, SuspendStop))
	}
	pull := cmp.Or(cfg.Pull, PullMissing)
	if pull != PullMissing && pull != PullNever {
		errs = append(errs, fmt.Errorf("pull policy %q; want %q or %q", cfg.Pull, PullMissing, PullNever))
	}
	if err := cfg.Timeouts.check(); err != nil {
		errs = append(errs, err)
	}
	volumes, err := newVolumeDirs(cfg.VolumeRoot, cfg)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("docker pool %q: %w", d.ID, err)
	}
	host := cmp.Or(cfg.Host, os.Getenv(client.EnvOverrideHost), client.DefaultDockerHost)
	api, err := newClient(host, cfg.Host == "")
	if err != nil {
		return nil, fmt.Errorf("docker pool %q: the Docker host %s: %w", d.ID, host, err)
	}
	p := &Pool{
		desc: d, api: api, host: host,
		grace: cmp.Or(cfg.StopGrace, DefaultStopGrace), timeouts: cfg.Timeouts.withDefaults(), suspend: suspend, pull: pull,
		devices: slices.Clone(cfg.Devices), cfg: cfg, log: cmp.Or(cfg.Log, slog.Default()),
		live:         kit.NewLive[*worker](d.GPUs),
		LocalVolumes: kit.LocalVolumes{Dirs: volumes, None: fmt.Errorf("docker pool %s keeps no network volumes: set its docker.volumeRoot to a directory that has the same path on the Docker host (%s) and where Gantry runs", d.ID, host)},
	}
	ping := func(ctx context.Context) (client.PingResult, error) {
		return api.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	}
	if _, err := engineCall(ctx, p, kindInspect, "Ping", ping); err != nil {
		_ = api.Close()
		return nil, fmt.Errorf("docker pool %q: the Docker engine at %s does not answer: %w", d.ID, host, err)
	}
	if err := p.cleanup(ctx); err != nil {
		_ = api.Close()
		return nil, fmt.Errorf("docker pool %q: removing the containers an earlier run left: %w", d.ID, err)
	}
	return p, nil
}

// newClient returns an Engine API client for host; fromEnv adds TLS from $DOCKER_CERT_PATH.
// The API version is negotiated on the first call.
func newClient(host string, fromEnv bool) (*client.Client, error) {
	transport := &http.Transport{MaxIdleConns: 16, IdleConnTimeout: idleConnTimeout}
	opts := []client.Opt{client.WithHTTPClient(&http.Client{Transport: transport}), client.WithHost(host)}
	// The scheme is set: the client would guess https from the HTTP/2 defaults of a cloned
	// transport.
	if dir := os.Getenv(client.EnvOverrideCertPath); fromEnv && dir != "" {
		opts = append(opts, client.WithScheme("https"),
			client.WithTLSClientConfig(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")))
	} else {
		opts = append(opts, client.WithScheme("http"))
	}
	return client.New(opts...)
}

// Close closes the pool's idle connections to the engine. It stops no worker (Shutdown does).
func (p *Pool) Close() error { return p.api.Close() }

// Describe returns the pool's description (a copy).
func (p *Pool) Describe() core.PoolInfo {
	d := p.desc
	d.CUDAVersions = slices.Clone(d.CUDAVersions)
	return d
}

var (
	_ pool.Pool      = (*Pool)(nil)
	_ pool.LogSource = (*Pool)(nil)
)

// Adapter is the docker adapter as the config file names it (adapter: docker).
var Adapter = kit.Adapter[Config]{Name: "docker", Validate: validate, Build: Build, Grace: grace}

// validate checks a pool's docker section before anything is built.
func validate(c *Config) error {
	if c == nil {
		return nil
	}
	if key, d := c.Timeouts.negative(); key != "" {
		return &kit.FieldError{Key: key, Msg: fmt.Sprintf("%s is negative: give a duration, or 0 for the default", d)}
	}
	return nil
}

// Build makes a docker pool from its description and its section (nil: the defaults), with
// the registry credentials, log directory and logger of env. New removes the containers an
// earlier run left on the host.
func Build(ctx context.Context, env kit.Env, desc core.PoolInfo, c *Config) (pool.Pool, error) {
	cfg := Config{}
	if c != nil {
		cfg = *c
	}
	cfg.Pool, cfg.LogDir, cfg.Log = desc, env.LogDir, env.Log
	if cfg.VolumeRoot == "" {
		cfg.VolumeRoot = localEngine(cfg.Host, env.VolumeRoot)
	}
	if env.Credential != nil {
		cfg.Credentials = func(ctx context.Context, id string) (Credential, error) {
			k, err := env.Credential(ctx, id)
			return Credential{Username: k.Username, Password: k.Password, ServerAddress: k.Server}, err
		}
	}
	return New(ctx, cfg)
}

// localEngine returns dir when the Docker host is this machine's engine (host, else
// $DOCKER_HOST, is "" or a unix socket), so that a directory made here is the one it mounts;
// "" for a remote engine.
func localEngine(host, dir string) string {
	if h := cmp.Or(host, os.Getenv("DOCKER_HOST")); h == "" || strings.HasPrefix(h, "unix://") {
		return dir
	}
	return ""
}

// grace is how long a docker pool's workers may take to stop: its stop grace.
func grace(c *Config) time.Duration {
	if c != nil && c.StopGrace > 0 {
		return c.StopGrace
	}
	return DefaultStopGrace
}
