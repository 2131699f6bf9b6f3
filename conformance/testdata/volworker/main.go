// Command volworker is the conformance suite's network-volume worker: a static binary run FROM
// scratch (image gantry-conformance/volworker) that speaks the worker protocol through
// Gantry's worker package. Its handler reads /runpod-volume/<input.read> and returns it with
// $GANTRY_VOLUME_PATH, and writes input.text to /runpod-volume/<input.write> when asked; a
// file it cannot read or write fails the job with the reason.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/gantryhq/gantry/worker"
)

const volume = "/runpod-volume"

func handle(_ context.Context, job *worker.Job, _ worker.Responder) (any, error) {
	var in struct{ Read, Write, Text string }
	if err := json.Unmarshal(job.Input, &in); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(volume, filepath.Base(in.Read)))
	if err != nil {
		return nil, err
	}
	if in.Write != "" {
		if err := os.WriteFile(filepath.Join(volume, filepath.Base(in.Write)), []byte(in.Text), 0o644); err != nil {
			return nil, err
		}
	}
	return map[string]string{"read": string(b), "path": os.Getenv("GANTRY_VOLUME_PATH")}, nil
}

func main() {
	cfg, err := worker.ConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := worker.Run(ctx, cfg, handle); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
