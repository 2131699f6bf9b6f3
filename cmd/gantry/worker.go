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
	"strings"
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
		fmt.Fprint(stderr, groupHelp("worker"))
	}
	if err := parseQuiet(fs, args); err != nil {
		return err
	}
	args = fs.Args()
	if len(args) == 0 && os.Getenv("GANTRY_WORKER") != "" {
		args = []string{os.Getenv("GANTRY_WORKER")} // a worker image (build/worker.Dockerfile) names it so
	}
	if len(args) != 1 {
		fs.Usage()
		return usagef("gantry worker takes list, logs, or the name of a built-in worker (%s)", strings.Join(builtinWorkerNames(), ", "))
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if serve, ok := builtinServers[args[0]]; ok {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		return serve(ctx, log)
	}
	h, ok := builtinWorkers[args[0]]
	if !ok {
		return usagef("no built-in worker %q (built-in: %s)", args[0], strings.Join(builtinWorkerNames(), ", "))
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
