package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/gantryhq/gantry/adapters/docker"
	"github.com/gantryhq/gantry/adapters/process"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/scheduler"
)

// DefaultShutdownGrace is how long a graceful stop lets running jobs finish before it puts
// them back in the queue (--shutdown-grace, shutdownGrace).
const DefaultShutdownGrace = 30 * time.Second

// graceful is a graceful stop, in the order Server.Shutdown runs it (gantry serve on SIGTERM or
// SIGINT):
//
//  1. drainJobs: new requests but the workers' are refused, no job is handed out and no worker
//     started (drain); running jobs have up to grace to finish, and their results are taken; the
//     ones still running are put back IN_QUEUE, their retries unchanged.
//  2. Shutdown stops serving HTTP and its background loops (the scheduler's Run closes it, which
//     stops every worker).
//  3. stopWorkers: the workers' exits are waited for, each applied to the job engine, so that
//     nothing writes to the store after it closes.
//  4. Close closes the stores.
type graceful struct {
	log   *slog.Logger
	grace time.Duration // 0 = put running jobs back at once
	drain func()        // the API's Drain and the scheduler's Hold
	jobs  *core.Jobs
	sched *scheduler.Scheduler
	// exitWait bounds how long stopWorkers waits for the workers to exit: longer than the
	// pools' stop grace (SIGTERM, then SIGKILL).
	exitWait time.Duration
}

// drainJobs stops taking requests and handing out jobs, waits up to the grace for the running
// jobs (cut closing ends the wait at once: a second signal), and puts back those still running.
func (g *graceful) drainJobs(cut <-chan struct{}) {
	g.drain()
	running := g.jobs.Running()
	g.log.Info("shutting down: no new requests or jobs; waiting for running jobs", "running", running, "grace", g.grace)
	ctx, cancel := context.WithTimeout(context.Background(), g.grace)
	defer cancel()
	go func() {
		select {
		case <-cut:
			g.log.Info("shutting down: a second signal ends the grace period")
			cancel()
		case <-ctx.Done():
		}
	}()
	start := time.Now()
	if running > 0 && g.jobs.WaitRunning(ctx, 10*time.Millisecond) {
		g.log.Info("shutting down: the running jobs finished", "after", time.Since(start).Round(time.Millisecond))
	}
	// The grace's context has ended by now; the release runs detached from it, since a job
	// still running must go back to the queue (the next start runs it, no retry spent).
	n, err := g.jobs.Release(context.WithoutCancel(ctx))
	if err != nil {
		g.log.Error("shutting down: putting running jobs back in the queue", "err", err)
	}
	if n > 0 {
		g.log.Info("shutting down: jobs still running are back in the queue, their retries unchanged; they run at the next start", "jobs", n)
	}
}

// stopWorkers stops every worker (a no-op when the scheduler's Run already closed it) and
// waits until their exits have been applied.
func (g *graceful) stopWorkers() {
	g.sched.Close()
	ctx, cancel := context.WithTimeout(context.Background(), g.exitWait)
	defer cancel()
	if err := g.sched.WaitStopped(ctx); err != nil {
		g.log.Error("shutting down: waiting for the workers to exit", "err", err)
	}
}

// exitWait is how long a stop waits for the pools' workers to exit: the longest stop grace
// of the pools, and 30 s more.
func exitWait(cfg *Config) time.Duration {
	grace := max(process.DefaultStopGrace, docker.DefaultStopGrace)
	for _, p := range cfg.Pools {
		if p.Docker != nil {
			grace = max(grace, p.Docker.StopGrace)
		}
	}
	return grace + 30*time.Second
}

// Grace is the shutdown grace: ShutdownGrace, or DefaultShutdownGrace when it is unset.
func (c *Config) Grace() time.Duration {
	if c.ShutdownGrace == nil {
		return DefaultShutdownGrace
	}
	return *c.ShutdownGrace
}
