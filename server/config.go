package server

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/gantryhq/gantry/adapters/docker"
	"github.com/gantryhq/gantry/adapters/kit"
	kube "github.com/gantryhq/gantry/adapters/kubernetes"
	"github.com/gantryhq/gantry/adapters/process"
	"github.com/gantryhq/gantry/adapters/runpod"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/models"
	"github.com/gantryhq/gantry/scheduler"
	"github.com/gantryhq/gantry/telemetry"
	"github.com/gantryhq/gantry/webhook"
)

// Config is what `gantry serve` runs with: flags override the config file, which overrides the
// defaults below.
type Config struct {
	// Listen is the address every API listens on. Default 127.0.0.1:8080.
	Listen string `yaml:"listen"`
	// Data is the state directory (Pebble store, keys, users). Default ./gantry-data.
	Data string `yaml:"data"`
	// Store is the PostgreSQL database replicas share (postgres://user:pass@host:5432/db);
	// "" = the embedded store in Data, for one server. Also --store and GANTRY_STORE.
	Store string `yaml:"store"`
	// PublicURL is the base of the URLs handed out (requestUrls, file URLs, a Kubernetes
	// pool's default workerUrl). Default http://<listen address>; required when the listen
	// address is every interface (0.0.0.0, [::]), which no client can reach. Also
	// --public-url and GANTRY_PUBLIC_URL.
	PublicURL string `yaml:"publicUrl"`
	// PeerURL is where the other replicas sharing the store reach this one, e.g.
	// http://10.0.0.5:8080: a replica that does not lead forwards the LOAD_BALANCER requests
	// it gets to the leader's. Default http://<listen address> when the listen address names
	// a host; none when it is every interface (0.0.0.0, [::]), and then the followers answer
	// those requests 503. Also --peer-url and GANTRY_PEER_URL.
	PeerURL string `yaml:"peerUrl"`
	// Quota is the default per-user rate limit, requests per window; 0 = unlimited in that
	// window; omitted = DefaultQuota. A user's own quota (gantry keys create --quota-*)
	// replaces it.
	Quota *core.Quota `yaml:"quota"`
	// Pools are the GPU pools. Default: one "local" pool of the process adapter with this
	// machine's GPUs, or CPU slots when it has none.
	Pools []PoolConfig `yaml:"pools"`
	// Registries are the registry credentials endpoints name in `registry`: docker pools
	// pull private images with them.
	Registries []RegistryConfig `yaml:"registries"`
	// NetworkVolumes are operator-provided network volumes: every user's endpoints may name
	// them, and the API lists them but cannot change or delete them.
	NetworkVolumes []core.NetworkVolume `yaml:"networkVolumes"`
	// VolumeStorage names, per data center, the pool that stores its network volumes;
	// a data center absent stores them in its first pool (config order) that can.
	VolumeStorage map[string]string `yaml:"volumeStorage"`
	// Templates are public catalog templates, offered beside the built-in ones.
	Templates []core.Template `yaml:"templates"`
	// Images maps container images to the command the process pool runs for them, e.g.
	// "my/worker:1": ["python3", "/srv/handler.py"]. Built-in images (gantry/echo) need none.
	Images map[string][]string `yaml:"images"`
	// Autoscaler tunes the scheduler; omitted fields keep their defaults.
	Autoscaler AutoscalerConfig `yaml:"autoscaler"`
	// Models changes the ready-made model catalog: an entry with a built-in id overrides the
	// fields it gives (or `disabled: true` removes the model); another id adds a model.
	Models []models.Override `yaml:"models"`
	// FileTTL is how long the files models produce are kept, and their signed URLs work.
	// Default 1h.
	FileTTL time.Duration `yaml:"fileTtl"`
	// ExpiredKeyGrace is how long an expired API key stays in the key list before it is
	// deleted. Default core.DefaultExpiredKeyGrace (7 days).
	ExpiredKeyGrace time.Duration `yaml:"expiredKeyGrace"`
	// FileJobQuotaMB is the MiB all the files one job stores may take; 0 = 64
	// (core.DefaultJobFileQuota). A worker's file past it is refused with 413.
	FileJobQuotaMB int64 `yaml:"fileJobQuotaMB"`
	// FileUserQuotaMB is the MiB the live files (those stored in the last fileTtl) of one
	// user's jobs may take at once; 0 = 1024 (core.DefaultUserFileQuota). Counted per replica.
	FileUserQuotaMB int64 `yaml:"fileUserQuotaMB"`
	// ShutdownGrace is how long a graceful stop (SIGTERM, SIGINT) lets running jobs finish
	// before it puts them back in the queue, their retries unchanged; 0 = at once; omitted =
	// DefaultShutdownGrace (30 s).
	ShutdownGrace *time.Duration `yaml:"shutdownGrace"`
	// Webhooks is where job webhooks may go (webhook.Config).
	Webhooks webhook.Config `yaml:"webhooks"`
	// Limits bounds request bodies (limits.go); omitted fields keep their defaults.
	Limits LimitsConfig `yaml:"limits"`
	// Telemetry exports OpenTelemetry traces over OTLP/HTTP; omitted = no traces.
	Telemetry telemetry.TraceConfig `yaml:"telemetry"`

	// catalog is the model catalog Models makes of the built-in one (set by Validate).
	catalog []models.Spec

	// devices names the GPUs of discovered pools (process.LocalDevices), by pool id.
	devices map[string][]string

	// file is the config file read ("" = none); lines has the line of each key it gave, by
	// key path (quota.minute), for Validate's messages.
	file  string
	lines map[string]int
}

// PoolConfig is one pool of the config file: the catalog's description of it, and the
// config section of its adapter (at most one, under the adapter's name). Each section's type
// is its adapter's own, documented there; server/pools.go registers the adapters.
type PoolConfig struct {
	core.PoolInfo `yaml:",inline"`
	// Process configures a process pool (only with adapter: process, the default); omitted =
	// the defaults.
	Process *process.Config `yaml:"process"`
	// Docker configures a docker pool (only with adapter: docker); omitted = the defaults.
	Docker *docker.Config `yaml:"docker"`
	// RunPod configures a runpod pool (required with adapter: runpod).
	RunPod *runpod.Config `yaml:"runpod"`
	// Kubernetes configures a kubernetes pool (only with adapter: kubernetes); omitted = the
	// defaults (in-cluster credentials, namespace default).
	Kubernetes *kube.Config `yaml:"kubernetes"`
}

// RegistryConfig is a registry credential: an endpoint whose `registry` is ID pulls its image
// with it.
type RegistryConfig struct {
	ID       string `yaml:"id"`
	Username string `yaml:"username"`
	// Password is the password or token; PasswordEnv names the environment variable that
	// holds it instead (one of the two is required).
	Password    string `yaml:"password"`
	PasswordEnv string `yaml:"passwordEnv"`
	// Server is the registry's address, e.g. ghcr.io; default the image's registry.
	Server string `yaml:"server"`
}

// catalogPools returns the catalog's view of the pools.
func (c *Config) catalogPools() []core.PoolInfo {
	pools := make([]core.PoolInfo, len(c.Pools))
	for i, p := range c.Pools {
		pools[i] = p.PoolInfo
	}
	return pools
}

// DefaultQuota is the default per-user rate limit.
var DefaultQuota = core.Quota{Minute: 600, Hour: 20000, Day: 200000}

// BuiltinTemplates are the public catalog templates every Gantry offers.
var BuiltinTemplates = []core.Template{
	{ID: "gantry-echo", Name: "Gantry echo worker", IsServerless: true,
		Container: core.Container{Image: "gantry/echo", Env: map[string]string{"ECHO_PREFIX": ""}}},
	{ID: "gantry-http-echo", Name: "Gantry HTTP echo worker (LOAD_BALANCER)", IsServerless: true,
		Container: core.Container{Image: "gantry/http-echo", Ports: []string{"80/http"}}},
	{ID: "gantry-pod-shell", Name: "Shell pod (not serverless)", IsServerless: false, StartSSH: true,
		Container: core.Container{Image: "gantry/echo", Ports: []string{"22/tcp"}}},
}

// AutoscalerConfig tunes the autoscaler. Every field is in seconds; 0 = the default.
type AutoscalerConfig struct {
	StableWindow int `yaml:"stableWindow"` // averaging window of REQUEST_COUNT and arrivals; default 60
	PanicWindow  int `yaml:"panicWindow"`  // the short window that detects bursts; default 6
	InitTimeout  int `yaml:"initTimeout"`  // a worker not ready this long after its start is stopped; default 420
	LBHold       int `yaml:"lbHold"`       // a LOAD_BALANCER request waits this long for a ready worker; default 60
}

// ConfigHelp documents the config file in `gantry serve --help`.
const ConfigHelp = `Config file (YAML, --config FILE; unknown keys are rejected; flags win):

  listen: 127.0.0.1:8080          # address of every API
  data: ./gantry-data             # state directory
  store: postgres://gantry@db:5432/gantry  # shared PostgreSQL for replicas; omitted = embedded
  publicUrl: http://127.0.0.1:8080 # base of the URLs handed out; required when listening on 0.0.0.0
  peerUrl: http://10.0.0.5:8080   # where other replicas reach this one (LOAD_BALANCER forwarding)
  quota: {minute: 600, hour: 20000, day: 200000}  # default per-user limits; 0 = unlimited
  pools:                          # replaces the discovered "local" pool when given
    - id: local                   # the id endpoints name in gpu.pools
      adapter: process            # process (local processes) or docker (containers)
      gpuType: NVIDIA A100 80GB PCIe   # "CPU" for CPU slots
      displayName: A100 80GB
      memoryInGb: 80
      count: 8                    # GPUs (or CPU slots) in the pool
      maxGpusPerWorker: 8         # largest gpu.count; default count
      cudaVersions: ["12.4", "12.6"]  # exact values allowedCudaVersions may name
      dataCenterId: EU-RO-1
      cpu: false                  # true: a pool of CPU slots (then vcpus, memoryPerVcpu)
      process:                    # optional
        user: gantry-worker       # who workers run as; default nobody when serving as root (never root)
        volumeRoot: /srv/gantry/volumes  # network volumes, a directory each; default <data>/volumes
    - id: docker-gpus             # a pool of containers on a Docker host
      adapter: docker
      gpuType: NVIDIA L4
      count: 2
      docker:                     # all optional
        host: unix:///var/run/docker.sock  # default $DOCKER_HOST, else this socket
        network: host             # the only mode: workers get free host ports
        suspend: pause            # FLASHBOOT: pause (default) or stop (keep stopped containers)
        pull: missing             # pull images the host lacks (default), or never
        stopGrace: 10s            # SIGTERM, then SIGKILL after this (whole seconds)
        devices: [GPU-6f1c..., GPU-0b2e...]  # the host's GPUs behind indices 0..count-1
        gpusByEnv: false          # true: NVIDIA_VISIBLE_DEVICES (nvidia default runtime), not device requests
        diskQuota: false          # true: endpoint disk limits the container (xfs+pquota, btrfs, zfs)
        init: false               # true: docker-init as PID 1 (workers without a SIGTERM handler)
        timeouts: {pull: 30m, inspect: 30s, change: 1m, stop: 30s, logs: 1m}  # engine call deadlines (these are the defaults)
        volumeRoot: /srv/gantry/volumes  # network volumes on the Docker host (same path here); default <data>/volumes with a local engine
    - id: burst                   # rented GPUs: each worker a RunPod pod (see docs/pools.md)
      adapter: runpod
      gpuType: NVIDIA GeForce RTX 4090  # RunPod's GPU type id
      count: 8                    # the most GPUs rented at once
      runpod:
        apiKeyEnv: RUNPOD_API_KEY # the variable holding the key (required)
        publicUrl: https://gantry.example.com  # where pods reach this Gantry (required, https)
        cloud: SECURE             # or COMMUNITY
        dataCenters: [US-TX-3]    # by preference; default any
        maxPods: 4                # cost guard: pods at once; 0 = no cap
        maxSpendPerHour: 5.0      # cost guard: USD/h at catalog prices; 0 = no cap
        stock: {LOW: 2, MEDIUM: 4}  # GPUs counted free at RunPod's stock levels; default LOW one pod, MEDIUM half the count, HIGH the count
        catalogEvery: 1m          # how often stock and prices are read again
        registries: {ghcr-me: rp-registry-id}  # endpoint registry id -> RunPod credential id
  registries:                     # credentials an endpoint's registry names (docker pools pull with them)
    - id: ghcr-me
      username: me
      passwordEnv: GHCR_TOKEN     # or password: ...
      server: ghcr.io
  networkVolumes:                 # operator-provided volumes: every user may name them, none change them
    - {id: vol-models, dataCenterId: EU-RO-1, size: 100}
  volumeStorage: {EU-RO-1: local} # data center -> the pool storing its volumes; default its first pool that can
  autoscaler:                     # seconds; 0 or omitted = the default
    stableWindow: 60              # REQUEST_COUNT and arrival-rate averaging window
    panicWindow: 6                # burst detection window (panic mode lasts a stable window)
    initTimeout: 420              # a worker not ready this long after its start is stopped
    lbHold: 60                    # a LOAD_BALANCER request waits this long for a ready worker
  images:                         # what the process pool runs for an image
    my/worker:1.0: [python3, /srv/worker/handler.py]   # e.g. a runpod-SDK handler
  templates:                      # extra public catalog templates
    - id: my-public-template
      name: My template
      image: example/worker:1.0
      isServerless: true
      env: {MODEL: small}
  fileTtl: 1h                     # how long files models produce (and their URLs) last
  expiredKeyGrace: 168h           # an expired API key stays listed this long, then is deleted
  fileJobQuotaMB: 64              # MiB all the files of one job may take
  fileUserQuotaMB: 1024           # MiB the live files of one user's jobs may take at once
  shutdownGrace: 30s              # on SIGTERM, running jobs may finish this long; then back in the queue
  webhooks:                       # job webhooks (POSTed when a job ends)
    allowPrivate: false           # true: may reach loopback/private/link-local addresses
    workers: 16                   # deliveries in flight at once
    queue: 1024                   # deliveries waiting; past it they wait in the store
  limits:                         # request bodies (flags --body-budget-mb, --body-timeout)
    bodyBudgetMB: 256             # MiB of bodies all requests hold at once; past it 503 (at least 64)
    bodyTimeout: 60s              # how long one body may take to arrive; past it 408
  telemetry:                      # OpenTelemetry traces (off when otlpEndpoint is omitted)
    otlpEndpoint: http://127.0.0.1:4318  # an OTLP/HTTP receiver; spans go to its /v1/traces
    serviceName: gantry
    sampleRatio: 1                # share of new traces kept (0 < r <= 1)
  models:                         # changes to the ready-made models (GET /v2/models)
    - id: gantry-image            # a built-in model: override the fields given
      price: "0.003"              # USD per unit (megapixel), exact to a millionth
      pools: [local]              # default: the first pool
      workers: {min: 0, max: 2, idleTimeout: 60}
      queueDelay: 4               # seconds, the QUEUE_DELAY scaler
      timeoutMs: 300000
    - id: gantry-video
      disabled: true              # remove a built-in model
    - id: my-sdxl                 # a new model: type and image are required
      type: IMAGE_GENERATION      # or VIDEO_GENERATION, TEXT_TO_SPEECH, TEXT_GENERATION
      image: example/sdxl:1.0     # must take the type's input and store its PNG via job-file
      name: SDXL
      price: "0.0024"
      env: {MODEL: sdxl-base}
`

// LoadConfig reads a config file strictly: an unknown key, a value of the wrong type or a
// second document is refused with the file, line and key path.
func LoadConfig(path string) (Config, error) {
	var c Config
	if path == "" {
		return c, c.Validate()
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	q := DefaultQuota
	c.Quota = &q // the windows the file leaves out keep their defaults
	if err := decodeConfig(path, b, &c); err != nil {
		return c, err
	}
	c.file = path
	return c, c.Validate()
}

// Validate checks what the config declares, and fills in the defaults it implies.
func (c *Config) Validate() error {
	if err := c.validateNumbers(); err != nil {
		return err
	}
	if c.Store != "" && !IsPostgresURL(c.Store) {
		return fmt.Errorf("store %q: want a PostgreSQL URL (postgres://user:password@host:5432/database), or none for the embedded store", redactURL(c.Store))
	}
	if err := c.validatePeerURL(); err != nil {
		return err
	}
	if err := c.validatePublicURL(); err != nil {
		return err
	}
	a := c.Autoscaler
	switch {
	case a.PanicWindow > cmp.Or(a.StableWindow, scheduler.StableWindow):
		return fmt.Errorf("autoscaler: panicWindow %d is longer than stableWindow %d", a.PanicWindow, cmp.Or(a.StableWindow, scheduler.StableWindow))
	}
	seen := map[string]bool{}
	for i, p := range c.Pools {
		switch {
		case p.ID == "":
			return fmt.Errorf("pools[%d]: id is required", i)
		case seen[p.ID]:
			return fmt.Errorf("pools[%d]: pool %q is declared twice", i, p.ID)
		case p.GPUs < 1:
			return fmt.Errorf("pool %q: count must be at least 1", p.ID)
		case !knownAdapter(p.Adapter):
			return fmt.Errorf("pool %q: unknown adapter %q (available: %s)", p.ID, p.Adapter, adapterNames())
		case foreignSection(p) != "":
			return fmt.Errorf("pool %q: a %s section needs adapter: %s", p.ID, foreignSection(p), foreignSection(p))
		case p.GPUType == "":
			return fmt.Errorf("pool %q: gpuType is required (\"CPU\" for CPU slots)", p.ID)
		}
		for _, v := range p.CUDAVersions {
			if !strings.Contains(v, ".") {
				return fmt.Errorf("pool %q: CUDA version %q is not major.minor", p.ID, v)
			}
		}
		if a, _ := adapterOf(p.Adapter); a.validate != nil {
			if err := a.validate(&p); err != nil {
				var fe *kit.FieldError
				if errors.As(err, &fe) {
					return c.errAt(fmt.Sprintf("pools[%d].%s.%s", i, a.name, fe.Key), "%s", fe.Msg)
				}
				return fmt.Errorf("pool %q: %w", p.ID, err)
			}
		}
		seen[p.ID] = true
		c.Pools[i].Adapter = cmp.Or(p.Adapter, "process")
		if p.DisplayName == "" {
			c.Pools[i].DisplayName = p.GPUType
		}
		if p.DataCenter == "" && p.Adapter != "runpod" {
			c.Pools[i].DataCenter = "LOCAL"
		}
	}
	regs := map[string]bool{}
	for i, r := range c.Registries {
		switch {
		case r.ID == "" || r.Username == "":
			return fmt.Errorf("registries[%d]: id and username are required", i)
		case regs[r.ID]:
			return fmt.Errorf("registries[%d]: registry %q is declared twice", i, r.ID)
		case (r.Password == "") == (r.PasswordEnv == ""):
			return fmt.Errorf("registry %q: give password or passwordEnv (one of them)", r.ID)
		}
		regs[r.ID] = true
	}
	for i, t := range c.Templates {
		if t.ID == "" || t.Image == "" {
			return fmt.Errorf("templates[%d]: id and image are required", i)
		}
	}
	for img, argv := range c.Images {
		if len(argv) == 0 || argv[0] == "" {
			return fmt.Errorf("images[%q]: the command is empty", img)
		}
	}
	for i, v := range c.NetworkVolumes {
		if v.ID == "" || v.DataCenter == "" {
			return fmt.Errorf("networkVolumes[%d]: id and dataCenterId are required", i)
		}
	}
	if err := c.validateVolumeStorage(); err != nil {
		return err
	}
	if c.ShutdownGrace != nil && *c.ShutdownGrace < 0 {
		return fmt.Errorf("shutdownGrace %v must not be negative", *c.ShutdownGrace)
	}
	if err := c.Webhooks.Validate(); err != nil {
		return err
	}
	if err := c.Telemetry.Validate(); err != nil {
		return err
	}
	if c.FileTTL < 0 {
		return fmt.Errorf("fileTtl %v must not be negative", c.FileTTL)
	}
	if c.ExpiredKeyGrace < 0 {
		return fmt.Errorf("expiredKeyGrace %v must not be negative", c.ExpiredKeyGrace)
	}
	if c.FileJobQuotaMB < 0 || c.FileUserQuotaMB < 0 {
		return fmt.Errorf("fileJobQuotaMB %d and fileUserQuotaMB %d must not be negative", c.FileJobQuotaMB, c.FileUserQuotaMB)
	}
	specs, err := models.Catalog(models.Builtin, c.Models)
	if err != nil {
		return err
	}
	c.catalog = specs
	return nil
}

// validatePublicURL checks publicUrl, when given: an absolute http or https URL naming a host
// that is not every interface, without credentials, query or fragment; a path is kept (a
// reverse proxy's prefix), without its trailing slash.
func (c *Config) validatePublicURL() error {
	if c.PublicURL == "" {
		return nil
	}
	const example = "e.g. https://gantry.example.com or http://10.0.0.5:8080"
	u, err := url.Parse(c.PublicURL)
	switch {
	case err != nil || u.Scheme != "http" && u.Scheme != "https":
		return c.errAt("publicUrl", "%q: want an http:// or https:// URL where clients reach this server, %s", c.PublicURL, example)
	case u.Host == "" || u.Hostname() == "":
		return c.errAt("publicUrl", "%q names no host: want %s", c.PublicURL, example)
	case u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return c.errAt("publicUrl", "%q: want a base URL without credentials, query or fragment, %s", c.PublicURL, example)
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		return c.errAt("publicUrl", "%q names every interface, which no client can reach: give the address clients use, %s", c.PublicURL, example)
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	return nil
}

// validatePeerURL checks peerUrl, when given: an absolute http or https URL naming a host,
// without credentials, query or fragment (the request's own path and query are appended).
func (c *Config) validatePeerURL() error {
	if c.PeerURL == "" {
		return nil
	}
	u, err := url.Parse(c.PeerURL)
	switch {
	case err != nil || u.Scheme != "http" && u.Scheme != "https":
		return c.errAt("peerUrl", "%q: want an http:// or https:// URL where the other replicas reach this one, e.g. http://10.0.0.5:8080", c.PeerURL)
	case u.Host == "" || u.Hostname() == "":
		return c.errAt("peerUrl", "%q names no host: want e.g. http://10.0.0.5:8080", c.PeerURL)
	case u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return c.errAt("peerUrl", "%q: want a base URL without credentials, query or fragment, e.g. http://10.0.0.5:8080", c.PeerURL)
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		return c.errAt("peerUrl", "%q names every interface, which no other replica can dial: give this replica's own address", c.PeerURL)
	}
	return nil
}
