package main

import (
	"cmp"
	"context"
	"io"
	"os"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/store/postgres"
)

// keysStore is the store the keys commands work on: the key directory in --data, or the
// PostgreSQL store that --store (or GANTRY_STORE) names, which every replica reads.
type keysStore struct {
	core.KeyStore
	check func(ctx context.Context, user string, ids []string, notes io.Writer) error
	close func()
	// revoked says when a running server refuses a revoked key.
	revoked string
}

// storeFlagHelp documents the keys commands' --store flag.
const storeFlagHelp = "PostgreSQL URL of the store the servers share (default $GANTRY_STORE; none = the key directory in --data)"

// openKeys opens the key store that store (or GANTRY_STORE) names, else the key directory of
// data (see openKeyDir).
func openKeys(ctx context.Context, data, store string, init bool) (*keysStore, error) {
	if url := cmp.Or(store, os.Getenv("GANTRY_STORE")); url != "" {
		cfg := server.Config{Store: url}
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		db, err := postgres.Open(ctx, url)
		if err != nil {
			return nil, err
		}
		return &keysStore{
			KeyStore: db,
			check: func(ctx context.Context, user string, ids []string, _ io.Writer) error {
				return checkEndpoints(ctx, &core.Management{Endpoints: db}, user, ids)
			},
			close:   db.Close,
			revoked: "every server refuses it from its next request",
		}, nil
	}
	dir, err := openKeyDir(data, init)
	if err != nil {
		return nil, err
	}
	return &keysStore{
		KeyStore: dir,
		check: func(ctx context.Context, user string, ids []string, notes io.Writer) error {
			return checkKeyEndpoints(ctx, data, user, ids, notes)
		},
		close:   dir.Close,
		revoked: "a running server refuses it within 10 s",
	}, nil
}
