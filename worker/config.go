package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variables read by [ConfigFromEnv]; the names are the runpod Python SDK's.
const (
	EnvTakeURL      = "RUNPOD_WEBHOOK_GET_JOB"     // [Config.TakeURL]
	EnvDoneURL      = "RUNPOD_WEBHOOK_POST_OUTPUT" // [Config.DoneURL]
	EnvStreamURL    = "RUNPOD_WEBHOOK_POST_STREAM" // [Config.StreamURL]
	EnvPingURL      = "RUNPOD_WEBHOOK_PING"        // [Config.PingURL]
	EnvToken        = "RUNPOD_AI_API_KEY"          // [Config.Token]
	EnvWorkerID     = "RUNPOD_POD_ID"              // [Config.WorkerID]
	EnvPingInterval = "RUNPOD_PING_INTERVAL"       // [Config.PingInterval], in milliseconds
	// EnvConcurrency is Gantry's own: [Config.Concurrency], set through the endpoint's env.
	EnvConcurrency = "GANTRY_CONCURRENCY"
)

// maxConcurrency is the largest Concurrency: job-take-batch's largest batch_size.
const maxConcurrency = 1024

// DefaultPingInterval is the ping interval used when [Config.PingInterval] is zero and
// RUNPOD_PING_INTERVAL is unset.
const DefaultPingInterval = 10 * time.Second

// Config tells [Run] where the worker-protocol endpoints are and how to call them.
type Config struct {
	// TakeURL is the job-take URL, normally with a query (…/job-take/<worker>?gpu=…).
	// The worker appends &job_in_progress=0|1. The job-stop URL is derived from it by
	// replacing the /job-take/ path segment with /job-stop/; without that segment no job-stop
	// poller runs. Required.
	TakeURL string
	// DoneURL is the job-done URL template; $ID is replaced by the job id and
	// &isStream=true|false is appended. Required.
	DoneURL string
	// StreamURL is the job-stream URL template; $ID is replaced by the job id. Empty means
	// [Responder.Stream] fails.
	StreamURL string
	// FileURL is the job-file URL template (Gantry's extension for [Responder.PutFile]); $ID is
	// replaced by the job id. Empty means it is derived from DoneURL by replacing the
	// /job-done/ path segment with /job-file/.
	FileURL string
	// PingURL is the ping URL. Empty means no pings.
	PingURL string
	// Token is sent as the bare value of the Authorization header (no "Bearer" prefix).
	// Empty means no Authorization header.
	Token string
	// WorkerID names this worker in logs.
	WorkerID string
	// PingInterval is the time between pings. Zero means [DefaultPingInterval].
	PingInterval time.Duration
	// Concurrency is the number of jobs run at once. Zero means 1: one job-take long-poll,
	// one job at a time. With more, as the runpod SDK's job scaler does, one long-poll at a
	// time asks for as many jobs as there are free slots (job-take-batch with batch_size, or
	// job-take for one) and each job runs on its own goroutine.
	Concurrency int
	// Client makes every request. Nil means a client with no overall timeout: each request
	// carries its own deadline.
	Client *http.Client
	// Log receives the worker's logs: at Info its start and each job taken, done, failed or
	// stopped; warnings and errors of the protocol. Nil means slog.Default().
	Log *slog.Logger

	// sleep waits for d or until ctx is done; tests replace it to record the delays asked for.
	sleep func(ctx context.Context, d time.Duration) error
}

// ConfigFromEnv reads the worker configuration from the environment variables the platform
// sets for each worker, as the runpod Python SDK does. Every variable but RUNPOD_PING_INTERVAL
// is required; the error names each missing one.
func ConfigFromEnv() (Config, error) {
	var missing []string
	get := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	cfg := Config{
		TakeURL:   get(EnvTakeURL),
		DoneURL:   get(EnvDoneURL),
		StreamURL: get(EnvStreamURL),
		PingURL:   get(EnvPingURL),
		Token:     get(EnvToken),
		WorkerID:  get(EnvWorkerID),
	}
	if len(missing) > 0 {
		return Config{}, fmt.Errorf("worker: missing environment variable %s", strings.Join(missing, ", "))
	}
	cfg.PingInterval = DefaultPingInterval
	if v := os.Getenv(EnvPingInterval); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 || ms > int64(24*time.Hour/time.Millisecond) {
			return Config{}, fmt.Errorf("worker: %s=%q: want a positive number of milliseconds", EnvPingInterval, v)
		}
		cfg.PingInterval = time.Duration(ms) * time.Millisecond
	}
	if v := os.Getenv(EnvConcurrency); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxConcurrency {
			return Config{}, fmt.Errorf("worker: %s=%q: want a number of jobs from 1 to %d", EnvConcurrency, v, maxConcurrency)
		}
		cfg.Concurrency = n
	}
	return cfg, nil
}

// withDefaults validates cfg and fills in its defaults.
func (cfg Config) withDefaults() (Config, error) {
	var errs []error
	checkURL := func(field, u string, required, template bool) {
		if u == "" {
			if required {
				errs = append(errs, fmt.Errorf("%s is required", field))
			}
			return
		}
		p, err := url.Parse(strings.ReplaceAll(u, "$ID", "x"))
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("%s %q is not an absolute http(s) URL", field, u))
		}
		if template && !strings.Contains(u, "$ID") {
			errs = append(errs, fmt.Errorf("%s %q has no $ID placeholder", field, u))
		}
	}
	checkURL("TakeURL", cfg.TakeURL, true, false)
	checkURL("DoneURL", cfg.DoneURL, true, true)
	checkURL("StreamURL", cfg.StreamURL, false, true)
	checkURL("FileURL", cfg.FileURL, false, true)
	checkURL("PingURL", cfg.PingURL, false, false)
	if cfg.Concurrency < 0 || cfg.Concurrency > maxConcurrency {
		errs = append(errs, fmt.Errorf("Concurrency %d is not from 0 to %d", cfg.Concurrency, maxConcurrency)) //nolint:staticcheck // it names the Config field, as the other checks do
	}
	if cfg.PingInterval < 0 {
		errs = append(errs, fmt.Errorf("PingInterval %v is negative", cfg.PingInterval))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("worker: invalid config: %w", err)
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 1)
	cfg.FileURL = cmp.Or(cfg.FileURL, fileURL(cfg.DoneURL))
	cfg.PingInterval = cmp.Or(cfg.PingInterval, DefaultPingInterval)
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.sleep == nil {
		cfg.sleep = sleep
	}
	return cfg, nil
}

// sleep waits for d or until ctx is done, and then returns ctx.Err().
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return ctx.Err()
}
