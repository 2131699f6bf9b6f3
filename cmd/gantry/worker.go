package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/gantryhq/gantry/models"
	"github.com/gantryhq/gantry/worker"
	"github.com/gantryhq/gantry/worker/echo"
	"github.com/gantryhq/gantry/worker/httpecho"
)

// builtinWorkers are the workers `gantry worker NAME` runs; image "gantry/NAME" maps to them.
var builtinWorkers = map[string]worker.Handler{
	"echo":   echo.Handler,
	"image":  models.Image,
	"video":  models.Video,
	"speech": models.Speech{}.Handle,
	"text":   models.Text,
}

// builtinServers are the built-in LOAD_BALANCER workers: HTTP servers on PORT.
var builtinServers = map[string]func(ctx context.Context, log *slog.Logger) error{
	"http-echo": func(ctx context.Context, log *slog.Logger) error {
		cfg, err := httpecho.ConfigFromEnv()
		if err != nil {
			return err
		}
		cfg.Log = log
		return httpecho.Run(ctx, cfg)
	},
}

func builtinWorkerNames() []string {
	names := slices.Collect(maps.Keys(builtinWorkers))
	names = slices.AppendSeq(names, maps.Keys(builtinServers))
	slices.Sort(names)
	return names
}

// runWorker runs a built-in worker against the Gantry named by the RUNPOD_* environment the
// process pool sets (the same variables RunPod workers read).
func runWorker(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("gantry worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: gantry worker NAME\n\nRuns a built-in worker; Gantry's process pool starts these for images gantry/NAME.\nIt reads RUNPOD_WEBHOOK_GET_JOB, RUNPOD_WEBHOOK_POST_OUTPUT, RUNPOD_WEBHOOK_POST_STREAM,\nRUNPOD_WEBHOOK_PING, RUNPOD_AI_API_KEY, RUNPOD_POD_ID and RUNPOD_PING_INTERVAL.\n\nBuilt-in workers: %v\n", builtinWorkerNames())
	}
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	args = fs.Args()
	if len(args) == 0 && os.Getenv("GANTRY_WORKER") != "" {
		args = []string{os.Getenv("GANTRY_WORKER")} // a worker image (build/worker.Dockerfile) names it so
	}
	if len(args) != 1 {
		fs.Usage()
		return usagef("name one built-in worker")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if serve, ok := builtinServers[args[0]]; ok {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		return serve(ctx, log)
	}
	h, ok := builtinWorkers[args[0]]
	if !ok {
		return usagef("no built-in worker %q (built-in: %v)", args[0], builtinWorkerNames())
	}
	cfg, err := worker.ConfigFromEnv()
	if err != nil {
		return err
	}
	cfg.Log = log
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return worker.Run(ctx, cfg, h)
}
