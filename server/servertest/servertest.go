// Package servertest starts whole Gantry servers for tests and benchmarks: the composition
// root (package server) on a loopback port and a temporary data directory, with workers run
// in process instead of as processes.
package servertest

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/server"
)

// New builds and starts a server from cfg and opts for the test, and stops it when the test
// ends. What they leave unset, it sets for a test: the data directory a temporary one, the
// listener a port of the kernel's on 127.0.0.1, the log discarded, and the pools one
// LocalPool of 64 slots, unless opts.Self names a gantry binary: then the pools are those
// the config makes (process pools running Self's built-in workers, whose logs they keep).
func New(tb testing.TB, cfg server.Config, opts server.Options) *server.Server {
	tb.Helper()
	s := Build(tb, cfg, opts)
	s.Start()
	return s
}

// Build is New without Start: the test can reach the parts before anything runs.
func Build(tb testing.TB, cfg server.Config, opts server.Options) *server.Server {
	tb.Helper()
	if cfg.Data == "" {
		cfg.Data = tb.TempDir()
	}
	if opts.Listener == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		opts.Listener = ln
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Pools == nil && opts.Self == "" {
		opts.Pools = []pool.Pool{LocalPool(64)}
	}
	s, err := server.New(context.Background(), cfg, opts)
	if err != nil {
		_ = opts.Listener.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // no grace: running jobs go back in the queue at once
		if err := s.Shutdown(ctx); err != nil {
			tb.Errorf("shutting the server down: %v", err)
		}
		s.Close()
	})
	return s
}

// Key issues an API key of scope for user (created if needed) on s and returns its secret.
func Key(tb testing.TB, s *server.Server, user string, scope core.Scope) string {
	tb.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	if _, err := s.Keys().GetUser(ctx, user); err != nil {
		if err := s.Keys().PutUser(ctx, core.User{Name: user, CreatedAt: now}); err != nil {
			tb.Fatal(err)
		}
	}
	secret := core.NewKeySecret()
	k := core.Key{ID: "key_" + core.NewID(10), Hash: core.HashKey(secret), User: user, Scope: scope, CreatedAt: now}
	if err := s.Keys().PutKey(ctx, k); err != nil {
		tb.Fatal(err)
	}
	return secret
}
