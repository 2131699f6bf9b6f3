package worker

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// discardLog drops logs.
var discardLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// fullEnv is a complete worker environment.
var fullEnv = map[string]string{
	EnvTakeURL:   "http://127.0.0.1:1/v2/ep/job-take/w?gpu=x",
	EnvDoneURL:   "http://127.0.0.1:1/v2/ep/job-done/w/$ID?gpu=x",
	EnvStreamURL: "http://127.0.0.1:1/v2/ep/job-stream/w/$ID?gpu=x",
	EnvPingURL:   "http://127.0.0.1:1/v2/ep/ping/w?gpu=x",
	EnvToken:     "tok",
	EnvWorkerID:  "w",
}

// setEnv sets the worker environment to env (unset names are emptied).
func setEnv(t *testing.T, env map[string]string) {
	for _, name := range []string{EnvTakeURL, EnvDoneURL, EnvStreamURL, EnvPingURL, EnvToken, EnvWorkerID, EnvPingInterval, EnvConcurrency} {
		t.Setenv(name, env[name])
	}
}

func TestConfigFromEnv(t *testing.T) {
	setEnv(t, fullEnv)
	cfg, err := ConfigFromEnv()
	if err != nil {
		t.Fatalf("ConfigFromEnv() = %v", err)
	}
	want := Config{
		TakeURL: fullEnv[EnvTakeURL], DoneURL: fullEnv[EnvDoneURL], StreamURL: fullEnv[EnvStreamURL],
		PingURL: fullEnv[EnvPingURL], Token: "tok", WorkerID: "w", PingInterval: 10 * time.Second,
	}
	if cfg.TakeURL != want.TakeURL || cfg.DoneURL != want.DoneURL || cfg.StreamURL != want.StreamURL ||
		cfg.PingURL != want.PingURL || cfg.Token != want.Token || cfg.WorkerID != want.WorkerID || cfg.PingInterval != want.PingInterval {
		t.Errorf("ConfigFromEnv() = %+v; want %+v", cfg, want)
	}
}

func TestConfigFromEnvPingInterval(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration // 0: an error
	}{
		{"2500", 2500 * time.Millisecond},
		{"0", 0},
		{"-1", 0},
		{"10s", 0},
	} {
		env := map[string]string{EnvPingInterval: tt.in}
		for k, v := range fullEnv {
			env[k] = v
		}
		setEnv(t, env)
		cfg, err := ConfigFromEnv()
		switch {
		case tt.want == 0 && (err == nil || !strings.Contains(err.Error(), EnvPingInterval)):
			t.Errorf("ConfigFromEnv() with %s=%q = %v; want an error naming it", EnvPingInterval, tt.in, err)
		case tt.want != 0 && (err != nil || cfg.PingInterval != tt.want):
			t.Errorf("ConfigFromEnv() with %s=%q = %v, %v; want %v", EnvPingInterval, tt.in, cfg.PingInterval, err, tt.want)
		}
	}
}

func TestConfigFromEnvConcurrency(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int // -1: an error
	}{
		{"", 0}, // unset: Concurrency 0, which Run takes as 1
		{"4", 4},
		{"1024", 1024},
		{"0", -1},
		{"1025", -1},
		{"four", -1},
	} {
		env := map[string]string{EnvConcurrency: tt.in}
		for k, v := range fullEnv {
			env[k] = v
		}
		setEnv(t, env)
		cfg, err := ConfigFromEnv()
		switch {
		case tt.want < 0 && (err == nil || !strings.Contains(err.Error(), EnvConcurrency)):
			t.Errorf("ConfigFromEnv() with %s=%q = %v; want an error naming it", EnvConcurrency, tt.in, err)
		case tt.want >= 0 && (err != nil || cfg.Concurrency != tt.want):
			t.Errorf("ConfigFromEnv() with %s=%q = %d, %v; want %d", EnvConcurrency, tt.in, cfg.Concurrency, err, tt.want)
		}
	}
}

func TestConfigFromEnvMissing(t *testing.T) {
	for name := range fullEnv {
		env := map[string]string{}
		for k, v := range fullEnv {
			if k != name {
				env[k] = v
			}
		}
		setEnv(t, env)
		if _, err := ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("ConfigFromEnv() without %s = %v; want an error naming it", name, err)
		}
	}
}

func TestRunInvalidConfig(t *testing.T) {
	t.Parallel()
	ok := Config{TakeURL: "http://h/job-take/w?x", DoneURL: "http://h/job-done/w/$ID?x"}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no TakeURL", func(c *Config) { c.TakeURL = "" }, "TakeURL is required"},
		{"no DoneURL", func(c *Config) { c.DoneURL = "" }, "DoneURL is required"},
		{"relative", func(c *Config) { c.TakeURL = "/job-take/w?x" }, "not an absolute http(s) URL"},
		{"no $ID", func(c *Config) { c.DoneURL = "http://h/job-done/w?x" }, "no $ID placeholder"},
		{"stream without $ID", func(c *Config) { c.StreamURL = "http://h/s" }, "no $ID placeholder"},
		{"negative Concurrency", func(c *Config) { c.Concurrency = -1 }, "Concurrency -1 is not from 0 to 1024"},
		{"too much Concurrency", func(c *Config) { c.Concurrency = 1025 }, "Concurrency 1025 is not from 0 to 1024"},
		{"negative PingInterval", func(c *Config) { c.PingInterval = -time.Second }, "PingInterval -1s is negative"},
	}
	h := func(context.Context, *Job, Responder) (any, error) { return nil, nil }
	for _, tt := range tests {
		cfg := ok
		tt.mutate(&cfg)
		// An invalid config must fail at once: a valid one would block until the context ends.
		if err := Run(t.Context(), cfg, h); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Run with %s = %v; want an error containing %q", tt.name, err, tt.want)
		}
	}
	if err := Run(t.Context(), ok, nil); err == nil {
		t.Errorf("Run with a nil Handler = nil; want an error")
	}
}
