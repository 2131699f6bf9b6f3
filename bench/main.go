// Command bench measures Gantry's job path against a bare net/http handler on the same machine,
// in one run, and writes the results table to a Markdown file (BENCHMARKS.md quotes it).
//
// Run it from the repository root (make bench does):
//
//	go run ./bench                       # every scenario, about 15 minutes on 2 cores
//	go run ./bench -only run,runsync     # some scenarios: run, backlog, runsync, e2e, memory, bigbody, scheduler, coldstart, lb, coldstart-docker, postgres, kubernetes
//	go run ./bench -mem-jobs 200000      # a smaller memory scenario
//	go run ./bench -only scheduler -sched-jobs 200000 -sched-bursts 4   # a smaller simulation
//
// It builds ./cmd/gantry (or uses -gantry BIN), starts `gantry serve` on 127.0.0.1:0 with a
// fresh data directory per scenario, issues a key with `gantry keys create`, and creates the
// endpoints through the management API, as a user would. The bare handler is this binary
// re-executed with -bare-serve: it reads the body and answers a fixed-shape JSON ack.
//
// Scenarios:
//
//	run      wrk (64 connections, 2 threads, 15 s) POSTs /run with a ~100-byte input to an
//	         endpoint with workers.max 0, and the same against the bare handler; then both are
//	         driven at fixed rates by a paced Go generator (latency from each request's
//	         scheduled send time, so a server that falls behind is charged for it)
//	backlog  a fresh server and durable floor filled to 0, 100k and 1M queued jobs (bursts of
//	         /run to an endpoint with workers.max 0), and at each level a fixed-rate pass of
//	         /run (2000 req/s, the paced generator) to both: whether the tail grows with the
//	         queue (about 8 minutes on 2 cores)
//	runsync  3000 sequential /runsync {"input":{"echo":1}} from one keep-alive client, with one
//	         warm gantry/echo worker; the same client against the bare handler
//	e2e      50,000 /run jobs from 64 clients through 64 gantry/echo worker processes; time
//	         until /health shows them all completed
//	memory   1,000,000 /run jobs with ~1 KB inputs into a fresh server (workers.max 0); the
//	         server's VmRSS and VmHWM afterwards, and the bare handler's after the same load
//	scheduler  in process, no server (sim.go, scheduler.go): the real scheduler and job engine
//	         over 10,000 generated endpoints and 1,000 simulated pools, 1,000,000 jobs in 20
//	         bursts; the autoscaler tick's duration under load, capacity reservations/s on 2
//	         cores, and the latency of a job reaching an idle warm worker (about 2 minutes)
//	coldstart  the first job on a scaled-to-zero gantry/echo endpoint (workers.min 0,
//	         idleTimeout 1 s), POST /runsync to COMPLETED, 10 times with flashboot OFF and
//	         10 resumes with FLASHBOOT; beside /health's coldStarts and /metrics'
//	         gantry_cold_start_seconds (about 1 minute)
//	lb       a LOAD_BALANCER endpoint with one gantry/http-echo worker: GET /x through the proxy
//	         ({base}/lb/{id}/x) against the same GET to the worker's own port, alternating
//	         direct and proxy passes: a light paced load (8 connections, 1000 req/s; the added
//	         p50), wrk with 8 connections, and saturation (wrk, 64 connections; the ratio of
//	         throughputs) (about 4 minutes)
//	coldstart-docker  coldstart with the workers as containers of a docker pool (echo image
//	         FROM scratch, built with build/worker.Dockerfile from a static build): flashboot
//	         OFF, FLASHBOOT with the pool's default suspend (pause), and FLASHBOOT on a pool
//	         with suspend: stop (about 2 minutes); skipped when no Docker engine answers
//	postgres  one durable PostgreSQL server started by the bench (Debian's binaries): the
//	         floor (-pg-jobs jobs through only the SQL a job needs: a committed insert per
//	         client, a SKIP LOCKED take and a committed done per worker, at the e2e clients' and
//	         workers' concurrency), then 1 to -pg-replicas `gantry serve --store` replicas (the
//	         e2e shape, /run spread over them), then the idle cost of three job stores with
//	         1,000 endpoints (PostgreSQL's CPU over 30 s) (about 3 minutes)
//	kubernetes  the kubernetes pool on kube-apiserver and kube-scheduler in a test process
//	         (TestBench in the nested module adapters/kubernetes/kubecluster): one worker at a
//	         time from the scale-up decision to pod created, bound, process started and first
//	         poll; then a burst of -kube-workers processless pods across 50 fake nodes at the
//	         pool's default client QPS and at 100: time to all running, API requests per
//	         worker, exit detection from the watch (build about 10 min the first time on 2
//	         cores, run about 2 minutes)
//
// With -profile (on by default) every scenario whose Gantry figure misses its target is re-run
// in process under `go test -bench` (engine_test.go in this directory) with -cpuprofile (or a
// heap profile for memory), and the top of `go tool pprof -top` is added to the results. The
// scheduler scenario profiles its own load phase instead and reports the tick's share of it.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// options are the command-line settings of one bench run.
type options struct {
	only      map[string]bool
	gantryBin string
	goCmd     string
	out       string
	keep      bool
	profile   bool

	// run
	wrkDuration  time.Duration // each wrk pass
	wrkConns     int
	wrkThreads   int
	rateDuration time.Duration // each fixed-rate pass
	runInputSize int           // bytes of the /run input object

	// backlog
	backlogLevels string  // queue lengths to measure at, e.g. "0,100k,1M"
	backlogRate   float64 // req/s of each fixed-rate pass

	// runsync
	runsyncN      int
	runsyncWarmup int

	// e2e
	e2eJobs        int
	e2eWorkers     int
	e2eClients     int
	e2eConcurrency int

	// memory
	memJobs      int
	memInputSize int
	memClients   int
	memBare      bool

	// scheduler (in process)
	schedEndpoints      int
	schedPools          int
	schedJobs           int
	schedBursts         int
	schedBurstEvery     time.Duration // real time between burst starts
	schedBurstMin       int           // endpoints a burst lands on, at least
	schedBurstMax       int           // and at most
	schedSubmitters     int
	schedSpeed          float64 // simulated seconds per real second
	schedDurable        bool
	schedDrain          time.Duration // how long to wait for the jobs after the last burst
	schedProbeEndpoints int
	schedProbeEvery     time.Duration
	schedWarmN          int
	schedFloorCPU       time.Duration // the scheduling floor's CPU per tick interval
	schedPlaceDuration  time.Duration
	schedPlaceProcs     int
	schedPlaceFill      float64
	schedSeed           uint64

	// coldstart, coldstart-docker
	coldN       int
	coldTimeout time.Duration // per cold start and per wait for scale-to-zero

	// lb
	lbPath       string        // the path requested (through the proxy after /lb/{id})
	lbRounds     int           // direct-then-proxy rounds of each load
	lbDuration   time.Duration // each pass
	lbRate       float64       // light load: req/s in all, paced
	lbLightConns int           // light load: connections (paced and wrk)
	lbConns      int           // saturation: wrk connections
	lbThreads    int           // wrk threads

	// postgres
	pgJobs          int
	pgConns         int // pool size of each database client (the floor, each replica)
	pgReplicas      int // measure 1 to this many replicas
	pgStatements    int // print the top statements of each Gantry pass (pg_stat_statements); 0 = none
	pgIdleEndpoints int
	pgIdleTakers    int
	pgIdleWindow    time.Duration

	// kubernetes
	kubeWorkers int    // workers of the burst
	kubeTest    string // a prebuilt kubecluster test binary, instead of go test
}

var scenarioNames = []string{"run", "backlog", "runsync", "e2e", "memory", "bigbody", "scheduler", "coldstart", "lb", "coldstart-docker", "postgres", "kubernetes"}

func main() {
	if len(os.Args) == 2 && os.Args[1] == floorWorkerFlag {
		ctx, stop := signalContext()
		defer stop()
		if err := runFloorWorker(ctx, os.Getenv("RUNPOD_WEBHOOK_GET_JOB"), os.Getenv("RUNPOD_WEBHOOK_POST_OUTPUT")); err != nil {
			fmt.Fprintln(os.Stderr, "bench", floorWorkerFlag+":", err)
			os.Exit(1)
		}
		return
	}
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	bare := fs.Bool("bare-serve", false, "internal: serve the bare handler on 127.0.0.1:0 and print its address")
	queueWorkers := fs.Int("bare-queue-workers", 0, "internal, with -bare-serve and -gantry: serve the queue floor with this many floor worker processes (bench -floor-worker: the bench's own echo worker, not gantry's) (the e2e floor)")
	bareDurable := fs.String("bare-durable", "", "internal, with -bare-serve: store each /run body in a Pebble store in this dir, synced, as Gantry's store does (the durable floor)")
	var o options
	only := fs.String("only", strings.Join(scenarioNames, ","), "comma-separated scenarios to run: "+strings.Join(scenarioNames, ", "))
	fs.StringVar(&o.gantryBin, "gantry", "", "gantry binary to benchmark (default: go build ./cmd/gantry into a temp dir)")
	fs.StringVar(&o.goCmd, "go", envOr("GO", "go"), "go command used to build gantry and run the profiles")
	fs.StringVar(&o.out, "out", "bench/results.md", "Markdown file the results table is written to")
	fs.BoolVar(&o.keep, "keep", false, "keep the temp dir (data dirs, server and worker logs, profiles)")
	fs.BoolVar(&o.profile, "profile", true, "profile in process (go test -bench ./bench) each scenario whose target is missed")
	fs.DurationVar(&o.wrkDuration, "duration", 15*time.Second, "run: length of each wrk pass")
	fs.IntVar(&o.wrkConns, "conns", 64, "run: wrk connections (and paced-generator connections)")
	fs.IntVar(&o.wrkThreads, "threads", 2, "run: wrk threads")
	fs.DurationVar(&o.rateDuration, "rate-duration", 10*time.Second, "run: length of each fixed-rate pass")
	fs.IntVar(&o.runInputSize, "run-input", 100, "run: bytes of the job input object")
	fs.StringVar(&o.backlogLevels, "backlog-levels", "0,100k,1M", "backlog: jobs queued before each fixed-rate pass (k = thousand, M = million), ascending")
	fs.Float64Var(&o.backlogRate, "backlog-rate", 2000, "backlog: req/s of each fixed-rate pass (well under saturation on 2 cores, so the tail is the server's, not a queue of requests)")
	fs.IntVar(&o.runsyncN, "runsync-n", 3000, "runsync: measured sequential requests")
	fs.IntVar(&o.runsyncWarmup, "runsync-warmup", 200, "runsync: unmeasured requests first")
	fs.IntVar(&o.e2eJobs, "e2e-jobs", 50000, "e2e: jobs submitted")
	fs.IntVar(&o.e2eWorkers, "e2e-workers", 64, "e2e: worker processes (workers.min = workers.max)")
	fs.IntVar(&o.e2eClients, "e2e-clients", 64, "e2e: concurrent submitting clients")
	fs.IntVar(&o.e2eConcurrency, "e2e-concurrency", 4, "e2e: jobs each worker runs at once in the second pass (GANTRY_CONCURRENCY; job-take-batch); 1 = no second pass")
	fs.IntVar(&o.memJobs, "mem-jobs", 1000000, "memory: jobs queued")
	fs.IntVar(&o.memInputSize, "mem-input", 1024, "memory: bytes of each job's input object")
	fs.IntVar(&o.memClients, "mem-clients", 64, "memory: concurrent submitting clients")
	fs.BoolVar(&o.memBare, "mem-bare", true, "memory: also send the same requests to a bare handler and report its RSS")
	fs.IntVar(&o.schedEndpoints, "sched-endpoints", 10000, "scheduler: endpoints in the simulation")
	fs.IntVar(&o.schedPools, "sched-pools", 1000, "scheduler: simulated pools")
	fs.IntVar(&o.schedJobs, "sched-jobs", 1000000, "scheduler: jobs submitted in all")
	fs.IntVar(&o.schedBursts, "sched-bursts", 20, "scheduler: bursts the jobs arrive in")
	fs.DurationVar(&o.schedBurstEvery, "sched-burst-every", 2*time.Second, "scheduler: real time from one burst's start to the next")
	fs.IntVar(&o.schedBurstMin, "sched-burst-min", 500, "scheduler: endpoints one burst lands on, at least")
	fs.IntVar(&o.schedBurstMax, "sched-burst-max", 3000, "scheduler: endpoints one burst lands on, at most")
	fs.IntVar(&o.schedSubmitters, "sched-submitters", 4, "scheduler: goroutines submitting each burst")
	fs.Float64Var(&o.schedSpeed, "sched-speed", 10, "scheduler: simulated seconds per real second (1 = real time)")
	fs.BoolVar(&o.schedDurable, "sched-durable", false, "scheduler: submit durable jobs (a WAL sync each) instead of runsync-style ones")
	fs.DurationVar(&o.schedDrain, "sched-drain", 2*time.Minute, "scheduler: how long to wait for the jobs to finish after the last burst")
	fs.IntVar(&o.schedProbeEndpoints, "sched-probe-endpoints", 1000, "scheduler: endpoints with idle workers kept out of the bursts for warm-worker probes")
	fs.DurationVar(&o.schedProbeEvery, "sched-probe-every", 2*time.Millisecond, "scheduler: interval of the warm-worker probes during the load")
	fs.DurationVar(&o.schedFloorCPU, "sched-floor-cpu", 2*time.Millisecond, "scheduler: CPU time the scheduling floor spins every tick interval beside the ticks (0 = no floor)")
	fs.IntVar(&o.schedWarmN, "sched-warm-n", 20000, "scheduler: sequential warm-worker probes after the load")
	fs.DurationVar(&o.schedPlaceDuration, "sched-place-duration", 3*time.Second, "scheduler: length of the placement measurement")
	fs.IntVar(&o.schedPlaceProcs, "sched-place-procs", 2, "scheduler: goroutines and GOMAXPROCS of the placement measurement (go test -cpu)")
	fs.Float64Var(&o.schedPlaceFill, "sched-place-fill", 0.5, "scheduler: share of the pools' capacity held by standing reservations while placing")
	fs.Uint64Var(&o.schedSeed, "sched-seed", 1, "scheduler: seed of the generated world and load")
	fs.IntVar(&o.coldN, "cold-n", 10, "coldstart: measured cold starts per mode (FLASHBOOT does one more, a fresh start, first)")
	fs.DurationVar(&o.coldTimeout, "cold-timeout", 60*time.Second, "coldstart, coldstart-docker: limit of one cold start, and of each wait for scale-to-zero")
	fs.StringVar(&o.lbPath, "lb-path", "/x", "lb: the path GET (http-echo echoes it)")
	fs.IntVar(&o.lbRounds, "lb-rounds", 2, "lb: rounds of a direct pass then a proxy pass, for each load")
	fs.DurationVar(&o.lbDuration, "lb-duration", 15*time.Second, "lb: length of each pass")
	fs.Float64Var(&o.lbRate, "lb-rate", 1000, "lb: light load, requests per second in all (paced)")
	fs.IntVar(&o.lbLightConns, "lb-light-conns", 8, "lb: light load connections (paced, and the closed-loop wrk pass)")
	fs.IntVar(&o.lbConns, "lb-conns", 64, "lb: saturation wrk connections")
	fs.IntVar(&o.lbThreads, "lb-threads", 2, "lb: wrk threads")
	fs.IntVar(&o.pgJobs, "pg-jobs", 20000, "postgres: jobs per pass (the floor, and each replica count)")
	fs.IntVar(&o.pgConns, "pg-conns", 32, "postgres: connection pool size of each database client (the floor, each replica)")
	fs.IntVar(&o.pgReplicas, "pg-replicas", 3, "postgres: measure 1 to this many gantry serve replicas")
	fs.IntVar(&o.pgStatements, "pg-statements", 0, "postgres: log this many of each Gantry pass's costliest statements, with calls and time per job (pg_stat_statements); 0 = none")
	fs.IntVar(&o.pgIdleEndpoints, "pg-idle-endpoints", 1000, "postgres: endpoints of the idle-cost measurement")
	fs.IntVar(&o.pgIdleTakers, "pg-idle-takers", 100, "postgres: parked takers (idle warm workers) of the idle-cost measurement")
	fs.DurationVar(&o.pgIdleWindow, "pg-idle-window", 30*time.Second, "postgres: length of the idle-cost measurement")
	fs.IntVar(&o.kubeWorkers, "kube-workers", 500, "kubernetes: workers of the burst (across 50 fake nodes)")
	fs.StringVar(&o.kubeTest, "kube-test", "", "kubernetes: a test binary of adapters/kubernetes/kubecluster (go test -c) to run instead of go test, where there is no Go toolchain")
	_ = fs.Parse(os.Args[1:])

	if *bare {
		serve := func() error { return serveBare(*bareDurable) }
		if *queueWorkers > 0 {
			serve = func() error { return serveQueueFloor(*queueWorkers, *bareDurable) }
		}
		if err := serve(); err != nil {
			fmt.Fprintln(os.Stderr, "bench -bare-serve:", err)
			os.Exit(1)
		}
		return
	}
	o.only = map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(scenarioNames, s) {
			fmt.Fprintf(os.Stderr, "bench: unknown scenario %q (known: %s)\n", s, strings.Join(scenarioNames, ", "))
			os.Exit(2)
		}
		o.only[s] = true
	}
	if err := runAll(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// runAll runs the chosen scenarios in order and writes the report, also when one fails.
func runAll(o options) error {
	if _, err := exec.LookPath("wrk"); err != nil && (o.only["run"] || o.only["lb"]) {
		return fmt.Errorf("wrk is not installed (apt-get install -y wrk): %w", err)
	}
	tmp, err := os.MkdirTemp("", "gantry-bench-")
	if err != nil {
		return err
	}
	if o.keep {
		logf("keeping %s", tmp)
	} else {
		defer func() { _ = os.RemoveAll(tmp) }()
	}
	if o.gantryBin == "" {
		o.gantryBin = filepath.Join(tmp, "gantry")
		logf("building %s", o.gantryBin)
		cmd := exec.Command(o.goCmd, "build", "-o", o.gantryBin, "./cmd/gantry")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building gantry (run from the repository root): %w", err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	b := &bench{o: o, tmp: tmp, self: self, started: time.Now(), machine: describeMachine(o.goCmd)}
	var errs []string
	for _, name := range scenarioNames {
		if !o.only[name] {
			continue
		}
		logf("=== scenario %s", name)
		nSections := len(b.sections)
		before := sampleCPU()
		var err error
		switch name {
		case "run":
			err = b.scenarioRun()
		case "backlog":
			err = b.scenarioBacklog()
		case "runsync":
			err = b.scenarioRunSync()
		case "e2e":
			err = b.scenarioE2E()
		case "memory":
			err = b.scenarioMemory()
		case "bigbody":
			err = b.scenarioBigBody()
		case "scheduler":
			err = b.scenarioScheduler()
		case "coldstart":
			err = b.scenarioColdStart()
		case "lb":
			err = b.scenarioLB()
		case "coldstart-docker":
			err = b.scenarioColdStartDocker()
		case "postgres":
			err = b.scenarioPostgres()
		case "kubernetes":
			err = b.scenarioKubernetes()
		}
		note, share := otherCPU(before, sampleCPU(), b.machine.cpus)
		logf("%s", note)
		if len(b.sections) > nSections {
			if share > 0.05 {
				note += " **The machine was not quiet: treat these figures as pessimistic.**"
			}
			b.sections[len(b.sections)-1].notes = append(b.sections[len(b.sections)-1].notes, note)
		}
		if err != nil {
			logf("scenario %s failed: %v", name, err)
			errs = append(errs, fmt.Sprintf("%s: %v", name, err))
			b.failures = append(b.failures, fmt.Sprintf("scenario %s did not complete: %v", name, err))
		}
	}
	if o.profile {
		b.profileMisses()
	}
	report := b.markdown()
	fmt.Println()
	fmt.Print(report)
	if o.out != "" {
		if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err == nil {
			if err := os.WriteFile(o.out, []byte(report), 0o644); err != nil {
				return err
			}
			logf("results written to %s", o.out)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d scenario(s) failed: %s", len(errs), strings.Join(errs, "; "))
	}
	return nil
}

// logf prints progress to stderr, so stdout carries only the report.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
