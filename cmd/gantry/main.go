// Command gantry is Gantry's one binary: `gantry serve` runs the platform (with the ready-made
// models), the client commands (`gantry login`, `endpoint`, `run`, `job`, `key`, ...) drive a
// server over the client generated from openapi.yaml, and `gantry worker NAME` runs a
// built-in worker.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/gcfloor"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/store/keydir"
)

const usage = `Gantry: a self-hosted serverless GPU platform.

Usage:
  gantry serve [flags]                  run the platform (gantry serve --help)
  gantry login --url URL --key KEY      check a key and save it as a profile
                                        (--key-stdin reads the key from stdin)
  gantry endpoint create|list|get|update|delete
  gantry template create|list|get|update|delete
  gantry volume create|list|get|resize|delete
  gantry run ENDPOINT --input JSON      run a job, show its progress and stream, print its output
  gantry job status|cancel|retry|stream|list ENDPOINT [JOB_ID]
  gantry worker list ENDPOINT           an endpoint's workers
  gantry worker logs ENDPOINT WORKER [-f]
  gantry key create|list|revoke         API keys over the API; with --data DIR (or
                                        --store URL), offline (gantry keys ... is the same)
  gantry usage                          your usage of ready-made models
  gantry model list                     the ready-made models
  gantry catalog gpus|templates|cpus    the GPU types per pool, the public templates, the CPU flavors
  gantry worker NAME                    run a built-in worker (gantry worker --help)
  gantry completion bash|zsh|fish       a shell completion script
  gantry version                        print the version and the revision built from

Client commands take --profile NAME and -o table|json|yaml; GANTRY_URL and GANTRY_KEY
override the saved profile. The key goes over plain http:// only to a loopback host,
unless --insecure (or GANTRY_INSECURE=1). Every command and command group takes --help
(exit status 0), e.g. gantry endpoint --help.
Exit status: 0 ok, 1 a usage error, 2 a failed call (or a job that ended FAILED, TIMED_OUT
or CANCELLED under gantry run), 3 the server unreachable.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	a := &app{stdout: os.Stdout, stderr: os.Stderr, stdin: os.Stdin, getenv: os.Getenv, isTTY: isTerminal(os.Stderr)}
	err := a.run(ctx, os.Args[1:])
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "gantry:", err)
		}
		os.Exit(exitCode(err))
	}
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// run runs the command line with the process's environment (tests of the server commands use
// it; the client commands' tests build an app of their own).
var errNoCommand = errors.New("no command given")

func run(args []string, stdout, stderr io.Writer) error {
	a := &app{stdout: stdout, stderr: stderr, stdin: os.Stdin, getenv: os.Getenv}
	return a.run(context.Background(), args)
}

func (a *app) run(ctx context.Context, args []string) error {
	stderr := a.stderr
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &usageError{errNoCommand}
	}
	if c, ok := lookup(args[0]); ok {
		return c.run(a, ctx, args[1:])
	}
	fmt.Fprint(stderr, usage)
	return usagef("unknown command %q", args[0])
}

func serve(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gantry serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "address to listen on (default 127.0.0.1:8080)")
	data := fs.String("data", "", "state directory (default ./gantry-data)")
	store := fs.String("store", "", "PostgreSQL URL of the store replicas share, postgres://user:password@host:5432/db (default $GANTRY_STORE, else the config's store:, else the embedded store in --data)")
	configPath := fs.String("config", "", "YAML config file (see below)")
	publicURL := fs.String("public-url", "", "base of the URLs handed out, where clients reach this server (default $GANTRY_PUBLIC_URL, else the config's publicUrl:, else http://<listen address>; required when that is 0.0.0.0 or [::])")
	peerURL := fs.String("peer-url", "", "where the other replicas on the store reach this one, for LOAD_BALANCER requests they forward to the leader (default $GANTRY_PEER_URL, else the config's peerUrl:, else http://<listen address> unless it is 0.0.0.0 or [::])")
	var qMinute, qHour, qDay quotaFlag
	fs.Var(&qMinute, "quota-minute", fmt.Sprintf("default requests per user per minute, a whole `number`; 0 = unlimited (default %d, or the config file's)", server.DefaultQuota.Minute))
	fs.Var(&qHour, "quota-hour", fmt.Sprintf("default requests per user per hour, a whole `number`; 0 = unlimited (default %d, or the config file's)", server.DefaultQuota.Hour))
	fs.Var(&qDay, "quota-day", fmt.Sprintf("default requests per user per day, a whole `number`; 0 = unlimited (default %d, or the config file's)", server.DefaultQuota.Day))
	var grace optDuration
	fs.Var(&grace, "shutdown-grace", fmt.Sprintf("on SIGTERM or SIGINT, how long running jobs may finish before they go back in the queue; 0 = at once (default %s)", server.DefaultShutdownGrace))
	webhookAllowPrivate := fs.Bool("webhook-allow-private", false, "let job webhooks reach loopback, private and link-local addresses (webhooks.allowPrivate)")
	bodyBudget := fs.Int64("body-budget-mb", 0, "MiB of request bodies all requests may hold at once; past it 503 (default 256, at least 64)")
	bodyTimeout := fs.Duration("body-timeout", 0, "how long one request body may take to arrive; past it 408 (default 60s)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: gantry serve [flags]\n\nRuns every Gantry API on one listener. GET /healthz answers 200 once ready;\nSIGTERM or SIGINT shuts down gracefully.\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\n%s", server.ConfigHelp)
	}
	if err := parseQuiet(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("serve takes no arguments, got %q", fs.Args())
	}
	cfg, err := server.LoadConfig(*configPath)
	if err != nil {
		return err
	}
	cfg.Listen = cmp.Or(*listen, cfg.Listen, server.DefaultListen)
	cfg.Data = cmp.Or(*data, cfg.Data, server.DefaultData)
	cfg.Store = cmp.Or(*store, os.Getenv("GANTRY_STORE"), cfg.Store)
	cfg.PublicURL = cmp.Or(*publicURL, os.Getenv("GANTRY_PUBLIC_URL"), cfg.PublicURL)
	cfg.PeerURL = cmp.Or(*peerURL, os.Getenv("GANTRY_PEER_URL"), cfg.PeerURL)
	cfg.ShutdownGrace = grace.or(cfg.ShutdownGrace)
	cfg.Webhooks.AllowPrivate = cfg.Webhooks.AllowPrivate || *webhookAllowPrivate
	cfg.Limits.BodyBudgetMB = cmp.Or(*bodyBudget, cfg.Limits.BodyBudgetMB)
	cfg.Limits.BodyTimeout = cmp.Or(*bodyTimeout, cfg.Limits.BodyTimeout)
	quota := server.DefaultQuota
	if cfg.Quota != nil {
		quota = *cfg.Quota
	}
	qMinute.apply(&quota.Minute)
	qHour.apply(&quota.Hour)
	qDay.apply(&quota.Day)
	cfg.Quota = &quota

	log := slog.New(slog.NewTextHandler(stderr, nil))
	defer gcfloor.Start(gcfloor.Default)() // a small heap is not collected every few MiB (docs/configuration.md: Memory)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	s, err := server.New(ctx, cfg, server.Options{Log: log, Builtins: builtinWorkerNames()})
	if err != nil {
		return err
	}
	defer s.Close()
	s.Start()
	cfg = s.Config()
	for _, p := range cfg.Pools {
		log.Info("pool", "id", p.ID, "gpuType", p.GPUType, "count", p.GPUs, "cudaVersions", strings.Join(p.CUDAVersions, ","), "dataCenter", p.DataCenter)
	}
	fmt.Fprintf(stdout, "Gantry is listening on http://%s (data: %s)\n", s.Addr(), cfg.Data)
	exe, _ := os.Executable()
	fmt.Fprintln(stdout, startupHint(invokedAs(os.Args[0], exe), "http://"+s.Addr(), cfg.Data, cfg.Store))
	fmt.Fprintln(stdout, "Ctrl-C (SIGINT) or SIGTERM stops it gracefully.")

	select {
	case err := <-s.Failed():
		return err
	case <-ctx.Done():
	}
	// A second signal cuts the grace period short.
	cut, stopCut := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stopCut()
	if err := s.Shutdown(cut); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Gantry stopped (its state is kept in %s).\n", stateWhere(cfg))
	return nil
}

// stateWhere names where a server keeps its state: the data directory, or the store.
func stateWhere(cfg server.Config) string {
	if cfg.Store != "" {
		return "the PostgreSQL store"
	}
	return cfg.Data
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
	store := fs.String("store", "", storeFlagHelp)
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
	if err := parseQuiet(fs, args); err != nil {
		return err
	}
	if *user == "" {
		fs.Usage()
		return usagef("--user is required")
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
	ctx := context.Background()
	dir, err := openKeys(ctx, *data, *store, *initData)
	if err != nil {
		return err
	}
	defer dir.close()
	if err := dir.check(ctx, *user, endpoints, stderr); err != nil {
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
		q := server.DefaultQuota
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
	store := fs.String("store", "", storeFlagHelp)
	if err := parseQuiet(fs, args); err != nil {
		return err
	}
	ctx := context.Background()
	dir, err := openKeys(ctx, *data, *store, false)
	if err != nil {
		return err
	}
	defer dir.close()
	// As over the API: keys expired past the grace period (and keys whose parent is gone)
	// are left out, and deleted.
	keys, err := (&core.KeyAdmin{Keys: dir, Clock: core.SystemClock{}}).List(ctx, "")
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
	store := fs.String("store", "", storeFlagHelp)
	if err := parseQuiet(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("name one key id (see gantry keys list)")
	}
	ctx := context.Background()
	dir, err := openKeys(ctx, *data, *store, false)
	if err != nil {
		return err
	}
	defer dir.close()
	if _, err := dir.DeleteKey(ctx, "", fs.Arg(0)); errors.Is(err, core.ErrNotFound) {
		return fmt.Errorf("no key %q (see gantry keys list)", fs.Arg(0))
	} else if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Revoked key %s and any keys made with it; %s.\n", fs.Arg(0), dir.revoked)
	return nil
}
