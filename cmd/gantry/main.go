// Command gantry is Gantry's one binary: `gantry serve` runs the platform (with the ready-made
// models), `gantry keys create` issues API keys, `gantry worker NAME` runs a built-in worker.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/gantryhq/gantry/adapters/docker"
	"github.com/gantryhq/gantry/adapters/process"
	"github.com/gantryhq/gantry/api"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/models"
	"github.com/gantryhq/gantry/scheduler"
	"github.com/gantryhq/gantry/store/filedir"
	"github.com/gantryhq/gantry/store/keydir"
	"github.com/gantryhq/gantry/store/pebble"
)

const usage = `Gantry: a self-hosted serverless GPU platform.

Usage:
  gantry serve [flags]          run the platform (gantry serve --help)
  gantry keys create [flags]    issue an API key (gantry keys create --help)
  gantry keys list [--data DIR] list API keys (ids, users, scopes; never secrets)
  gantry keys revoke [--data DIR] KEY_ID
                                revoke a key (the server refuses it within 10 s)
  gantry worker NAME            run a built-in worker (gantry worker --help)
  gantry version                print the version and the revision built from

Every command takes --help (exit status 0); an error exits with status 2.
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "gantry:", err)
		}
		os.Exit(exitCode(err))
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "keys":
		if len(args) < 2 {
			fmt.Fprint(stderr, usage)
			return errors.New(`"keys" takes a subcommand: create, list or revoke`)
		}
		switch args[1] {
		case "create":
			return keysCreate(args[2:], stdout, stderr)
		case "list":
			return keysList(args[2:], stdout, stderr)
		case "revoke":
			return keysRevoke(args[2:], stdout, stderr)
		}
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown keys subcommand %q (create, list or revoke)", args[1])
	case "worker":
		return runWorker(args[1:], stderr)
	case "version", "--version":
		printVersion(stdout)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func serve(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gantry serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "address to listen on (default 127.0.0.1:8080)")
	data := fs.String("data", "", "state directory (default ./gantry-data)")
	configPath := fs.String("config", "", "YAML config file (see below)")
	publicURL := fs.String("public-url", "", "base of the requestUrls handed out (default http://<listen address>)")
	var qMinute, qHour, qDay quotaFlag
	fs.Var(&qMinute, "quota-minute", fmt.Sprintf("default requests per user per minute, a whole `number`; 0 = unlimited (default %d, or the config file's)", DefaultQuota.Minute))
	fs.Var(&qHour, "quota-hour", fmt.Sprintf("default requests per user per hour, a whole `number`; 0 = unlimited (default %d, or the config file's)", DefaultQuota.Hour))
	fs.Var(&qDay, "quota-day", fmt.Sprintf("default requests per user per day, a whole `number`; 0 = unlimited (default %d, or the config file's)", DefaultQuota.Day))
	var grace optDuration
	fs.Var(&grace, "shutdown-grace", fmt.Sprintf("on SIGTERM or SIGINT, how long running jobs may finish before they go back in the queue; 0 = at once (default %s)", DefaultShutdownGrace))
	webhookAllowPrivate := fs.Bool("webhook-allow-private", false, "let job webhooks reach loopback, private and link-local addresses (webhooks.allowPrivate)")
	bodyBudget := fs.Int64("body-budget-mb", 0, "MiB of request bodies all requests may hold at once; past it 503 (default 256, at least 64)")
	bodyTimeout := fs.Duration("body-timeout", 0, "how long one request body may take to arrive; past it 408 (default 60s)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: gantry serve [flags]\n\nRuns every Gantry API on one listener. GET /healthz answers 200 once ready;\nSIGTERM or SIGINT shuts down gracefully.\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\n%s", configFileHelp)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve takes no arguments, got %q", fs.Args())
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	cfg.Listen = firstOf(*listen, cfg.Listen, "127.0.0.1:8080")
	cfg.Data = firstOf(*data, cfg.Data, "./gantry-data")
	cfg.PublicURL = firstOf(*publicURL, cfg.PublicURL)
	cfg.ShutdownGrace = grace.or(cfg.ShutdownGrace)
	cfg.Webhooks.AllowPrivate = cfg.Webhooks.AllowPrivate || *webhookAllowPrivate
	cfg.Limits.BodyBudgetMB = cmp.Or(*bodyBudget, cfg.Limits.BodyBudgetMB)
	cfg.Limits.BodyTimeout = cmp.Or(*bodyTimeout, cfg.Limits.BodyTimeout)
	if err := cfg.Limits.validate(); err != nil {
		return err
	}
	quota := DefaultQuota
	if cfg.Quota != nil {
		quota = *cfg.Quota
	}
	qMinute.apply(&quota.Minute)
	qHour.apply(&quota.Hour)
	qDay.apply(&quota.Day)

	log := slog.New(slog.NewTextHandler(stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	if len(cfg.Pools) == 0 {
		inv := process.Discover(ctx)
		log.Info("local pool", "discovery", inv.Description)
		for _, p := range process.LocalPools(inv) {
			cfg.Pools = append(cfg.Pools, PoolConfig{Pool: p})
		}
		cfg.devices = process.LocalDevices(inv)
	}

	if err := os.MkdirAll(cfg.Data, 0o700); err != nil {
		return fmt.Errorf("creating the data directory: %w", err)
	}
	st, err := pebble.Open(filepath.Join(cfg.Data, "pebble"))
	if err != nil {
		return err
	}
	defer st.Close()
	keys, err := keydir.Open(cfg.Data)
	if err != nil {
		return err
	}
	defer keys.Close()

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	cfg.Webhooks.listensOn(ln.Addr())
	if cfg.PublicURL == "" {
		cfg.PublicURL = "http://" + addr
	}

	clock := core.SystemClock{}
	fileDir, err := filedir.Open(filepath.Join(cfg.Data, "files"))
	if err != nil {
		return err
	}
	fileKey, err := filedir.LoadKey(filepath.Join(cfg.Data, "files.key"))
	if err != nil {
		return fmt.Errorf("loading the file-signing key: %w", err)
	}
	files := &core.Files{Store: fileDir, Key: fileKey, TTL: cfg.FileTTL, Clock: clock}
	queues := &scheduler.Queues{}
	// Closed before the store: retries stop, and undelivered jobs stay marked for the restart.
	webhooks := cfg.Webhooks.deliveries(log)
	defer webhooks.Close()
	// Worker tokens are signed with a key kept in the store: they outlive a restart.
	tokens, err := core.NewWorkerTokens(ctx, st, clock)
	if err != nil {
		return err
	}
	jobs := core.NewJobs(core.JobsConfig{Store: st, Dispatch: queues, Clock: clock, Log: log, Tokens: tokens,
		Notify: webhooks, Meter: models.NewMeter(cfg.catalog, files), Usage: st})
	queued, requeued, err := jobs.Recover()
	if err != nil {
		return err
	}
	if queued+requeued > 0 {
		log.Info("recovered jobs", "queued", queued, "requeuedFromLostWorkers", requeued)
	}
	templates := append(append([]core.Template{}, BuiltinTemplates...), cfg.Templates...)
	for i := range templates {
		if templates[i].CreatedAt.IsZero() {
			templates[i].CreatedAt = clock.Now().UTC().Truncate(time.Second) // public templates are as old as this server
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary for built-in workers: %w", err)
	}
	pools, err := newPools(ctx, &cfg, self, log)
	if err != nil {
		return err
	}
	defer shutdownPools(&cfg, pools, log)
	catalog := core.NewCatalog(cfg.catalogPools(), cfg.NetworkVolumes, templates)
	sched, err := scheduler.New(scheduler.Config{Jobs: jobs, Queues: queues, Pools: pools,
		BaseURL: "http://" + loopback(addr), Clock: clock, Log: log,
		StableWindow: cfg.Autoscaler.StableWindow, PanicWindow: cfg.Autoscaler.PanicWindow,
		InitTimeout: time.Duration(cfg.Autoscaler.InitTimeout) * time.Second,
		VolumeDC:    func(id string) (string, bool) { v, ok := catalog.NetworkVolume(id); return v.DataCenter, ok }})
	if err != nil {
		return err
	}
	queues.OnEnqueue = sched.Demand
	catalog.Available = sched.Placer().Free
	catalog.CanRun = sched.Placer().CanRun // an image no listed pool can run is refused (422)
	mgmt := &core.Management{
		Endpoints: st, Templates: st, Clock: clock, Catalog: catalog,
		OnChange: sched.Set, // new scaling, bounds or GPUs take effect at once
		OnDelete: func(id string) {
			jobs.Purge(id) // a deleted endpoint's queue is cancelled, its workers stopped
			sched.Remove(id)
		},
	}
	if err := syncModelEndpoints(ctx, mgmt, cfg.catalog, cfg.Pools[0].ID, log); err != nil {
		return err
	}
	modelCatalog := models.CoreCatalog(cfg.catalog)
	apiCfg := api.Config{
		Management: mgmt,
		Auth:       &core.Authenticator{Keys: keys, Defaults: quota, Clock: clock},
		Limiter:    &core.RateLimiter{},
		Jobs:       jobs,
		Balancer:   sched,
		Fleet:      sched,
		LBHold:     time.Duration(cfg.Autoscaler.LBHold) * time.Second,
		Models:     modelCatalog,
		Billing:    &core.Billing{Usage: st, Models: modelCatalog},
		Files:      files,
		Clock:      clock,
		PublicURL:  cfg.PublicURL,
		Log:        log,
		Webhooks:   cfg.Webhooks.policy(),
	}
	cfg.Limits.apiLimits(&apiCfg)
	a, err := api.New(apiCfg)
	if err != nil {
		return err
	}
	// Long polls and waits end when serving stops, so shutdown does not wait 30 s for them.
	serveCtx, stopServing := context.WithCancel(context.Background())
	defer stopServing()
	var background sync.WaitGroup
	background.Add(3)
	go func() { defer background.Done(); jobs.Run(serveCtx, 250*time.Millisecond) }()
	go func() { defer background.Done(); sched.Run(serveCtx, st, time.Second, 30*time.Second) }()
	go func() { defer background.Done(); sweepFiles(serveCtx, files, time.Minute, log) }()

	mux := http.NewServeMux()
	mux.Handle("/", a)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = sched.WriteMetrics(w)
	})
	mux.Handle("/metrics", a.NotAllowed(api.HeadAllow)) // the other methods: 405 problem+json
	srv := &http.Server{
		BaseContext:       func(net.Listener) context.Context { return serveCtx },
		Handler:           a.CleanPaths(mux),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(api.ProblemListener(ln, srv.MaxHeaderBytes)) }()
	a.SetReady(true)

	for _, p := range cfg.Pools {
		log.Info("pool", "id", p.ID, "gpuType", p.GPUType, "count", p.GPUs, "cudaVersions", strings.Join(p.CUDAVersions, ","), "dataCenter", p.DataCenter)
	}
	fmt.Fprintf(stdout, "Gantry is listening on http://%s (data: %s)\n", addr, cfg.Data)
	fmt.Fprintln(stdout, startupHint(cfg.Data))

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	cut := make(chan os.Signal, 1) // a second signal cuts the grace period short
	signal.Notify(cut, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(cut)
	g := &graceful{log: log, grace: cfg.shutdownGrace(), drain: func() { a.Drain(); sched.Hold() }, jobs: jobs, sched: sched, exitWait: exitWait(&cfg)}
	g.drainJobs(cut)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stopServing()
	lbDone := make(chan error, 1) // the connections the load-balancing proxy took over, at the same time
	go func() { lbDone <- a.Shutdown(shutdownCtx) }()
	err = srv.Shutdown(shutdownCtx)
	if lbErr := <-lbDone; err == nil {
		err = lbErr
	}
	background.Wait() // ticks done, workers told to stop
	g.stopWorkers()   // their exits applied: the store can close
	if err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	return nil
}

// syncModelEndpoints makes the platform endpoints match the model catalog: each model's
// endpoint is created or updated (its workers start and scale like any endpoint's), and the
// endpoints of models no longer in the catalog are deleted.
func syncModelEndpoints(ctx context.Context, mgmt *core.Management, specs []models.Spec, defaultPool string, log *slog.Logger) error {
	want := map[string]bool{}
	for _, s := range specs {
		want[s.ID] = true
		if _, err := mgmt.PutPlatformEndpoint(ctx, s.Endpoint(defaultPool)); err != nil {
			return fmt.Errorf("model %s: its endpoint: %w", s.ID, err)
		}
		log.Info("ready-made model", "id", s.ID, "type", s.Type, "image", s.Image, "pricePerUnit", core.FormatMicros(s.PriceMicros))
	}
	eps, err := mgmt.PlatformEndpoints(ctx)
	if err != nil {
		return err
	}
	for _, ep := range eps {
		if !want[ep.ID] {
			if err := mgmt.DeletePlatformEndpoint(ctx, ep.ID); err != nil {
				return fmt.Errorf("removing the endpoint of model %s, no longer in the catalog: %w", ep.ID, err)
			}
			log.Info("ready-made model removed", "id", ep.ID)
		}
	}
	return nil
}

// sweepFiles removes expired produced files every interval until ctx ends.
func sweepFiles(ctx context.Context, files *core.Files, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := files.Sweep(ctx); err != nil && ctx.Err() == nil {
			log.Error("removing expired files", "err", err)
		} else if n > 0 {
			log.Info("removed expired files", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// loopback turns a listen address into one workers on this machine can dial.
func loopback(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func keysCreate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gantry keys create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "./gantry-data", "state directory of the server the key is for")
	user := fs.String("user", "", "user the key belongs to (created if needed); required")
	scope := fs.String("scope", "all", "what the key may do: all, read (reads only) or jobs (job operations only)")
	initData := fs.Bool("init", false, "start a new data directory at --data if it holds no Gantry data yet (without it, such a --data is refused)")
	var endpoints stringList
	fs.Var(&endpoints, "endpoint", "with --scope jobs: an endpoint id the key may use (repeatable; none = all); checked to be the user's or a ready-made model's while no gantry serve holds --data, else not checked")
	expires := fs.Duration("expires", 0, "key lifetime, e.g. 720h (0 = never expires)")
	var qMinute, qHour, qDay quotaFlag
	fs.Var(&qMinute, "quota-minute", "set the user's own requests-per-minute quota, a whole `number` (0 = unlimited; windows not given keep the user's or the default)")
	fs.Var(&qHour, "quota-hour", "set the user's own requests-per-hour quota, a whole `number` (0 = unlimited)")
	fs.Var(&qDay, "quota-day", "set the user's own requests-per-day quota, a whole `number` (0 = unlimited)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: gantry keys create --user NAME [flags]\n\nIssues an API key and prints it as the last line of stdout. The key is shown once;\nonly its SHA-256 is stored. Works while `gantry serve` runs on the same --data.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *user == "" {
		fs.Usage()
		return errors.New("--user is required")
	}
	if !keydir.NameRE.MatchString(*user) {
		return fmt.Errorf("--user %q: use letters, digits, '.', '_' or '-' (at most 64)", *user)
	}
	sc, err := core.ParseScope(*scope)
	if err != nil {
		return fmt.Errorf("--scope: %w", err)
	}
	if len(endpoints) > 0 && sc != core.ScopeJobs {
		return errors.New("--endpoint applies only with --scope jobs")
	}
	if *expires < 0 {
		return errors.New("--expires must not be negative")
	}
	dir, err := openKeyDir(*data, *initData)
	if err != nil {
		return err
	}
	defer dir.Close()
	ctx := context.Background()
	if err := checkKeyEndpoints(ctx, *data, *user, endpoints, stderr); err != nil {
		return err
	}
	now := time.Now().UTC()

	u, err := dir.GetUser(ctx, *user)
	created := errors.Is(err, core.ErrNotFound)
	if err != nil && !created {
		return err
	}
	if created {
		u = core.User{Name: *user, CreatedAt: now}
	}
	if qMinute.set || qHour.set || qDay.set {
		q := DefaultQuota
		if u.Quota != nil {
			q = *u.Quota
		}
		qMinute.apply(&q.Minute)
		qHour.apply(&q.Hour)
		qDay.apply(&q.Day)
		u.Quota = &q
	}
	if err := dir.PutUser(ctx, u); err != nil {
		return err
	}

	secret := core.NewKeySecret()
	k := core.Key{ID: "key_" + core.NewID(10), Hash: core.HashKey(secret), User: *user, Scope: sc, Endpoints: endpoints, CreatedAt: now}
	if *expires > 0 {
		t := now.Add(*expires)
		k.ExpiresAt = &t
	}
	if err := dir.PutKey(ctx, k); err != nil {
		return err
	}
	if created {
		fmt.Fprintf(stdout, "Created user %s.\n", *user)
	}
	fmt.Fprintf(stdout, "Created key %s for %s (scope %s). It is shown once; keep it safe:\n%s\n", k.ID, *user, sc, secret)
	return nil
}

func keysList(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gantry keys list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "./gantry-data", "state directory of the server")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := openKeyDir(*data, false)
	if err != nil {
		return err
	}
	defer dir.Close()
	keys, err := dir.ListKeys()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tUSER\tSCOPE\tENDPOINTS\tCREATED\tEXPIRES")
	for _, k := range keys {
		expires := "never"
		if k.ExpiresAt != nil {
			expires = k.ExpiresAt.UTC().Format(time.RFC3339)
		}
		eps := strings.Join(k.Endpoints, ",")
		if eps == "" {
			eps = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.User, k.Scope, eps, k.CreatedAt.UTC().Format(time.RFC3339), expires)
	}
	return tw.Flush()
}

func keysRevoke(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gantry keys revoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "./gantry-data", "state directory of the server")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("name one key id (see gantry keys list)")
	}
	dir, err := openKeyDir(*data, false)
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := dir.DeleteKey(fs.Arg(0)); errors.Is(err, core.ErrNotFound) {
		return fmt.Errorf("no key %q (see gantry keys list)", fs.Arg(0))
	} else if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Revoked key %s; a running server refuses it within 10 s.\n", fs.Arg(0))
	return nil
}

// newPools makes the scheduler's pools from the configured (or discovered) catalog pools: the
// process adapter's, and the docker adapter's (New removes the containers an earlier run left
// on their hosts). Docker pools pull private images with the credential an endpoint's
// registry names, from the config's registries. On an error the pools made so far are shut
// down.
func newPools(ctx context.Context, cfg *Config, self string, log *slog.Logger) (pools []scheduler.Pool, err error) {
	defer func() {
		if err != nil {
			shutdownPools(cfg, pools, log)
		}
	}()
	logDir := filepath.Join(cfg.Data, "workers")
	for _, p := range cfg.Pools {
		switch p.Adapter {
		case "", "process":
			pool, err := process.New(process.Config{Pool: p.Pool, Self: self, Builtins: builtinWorkerNames(),
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
