package main

import (
	"cmp"
	"context"
	"io"
	"os"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/server"
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
// data (see checkKeyDir), through server.OpenKeyStores.
func openKeys(ctx context.Context, data, store string, init bool) (*keysStore, error) {
	cfg := server.Config{Store: cmp.Or(store, os.Getenv("GANTRY_STORE"))}
	if cfg.Store != "" {
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
	} else if err := checkKeyDir(data, init); err != nil {
		return nil, err
	}
	cfg.Data = data
	ks, err := server.OpenKeyStores(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if ks.Shared {
		return &keysStore{
			KeyStore: ks.Keys,
			check: func(ctx context.Context, user string, ids []string, _ io.Writer) error {
				endpoints, release, err := ks.Endpoints()
				if err != nil {
					return err
				}
				defer release()
				return checkEndpoints(ctx, &core.Management{Endpoints: endpoints}, user, ids)
			},
			close:   ks.Close,
			revoked: "every server refuses it from its next request",
		}, nil
	}
	return &keysStore{
		KeyStore: ks.Keys,
		check: func(ctx context.Context, user string, ids []string, notes io.Writer) error {
			return checkKeyEndpoints(ctx, ks, data, user, ids, notes)
		},
		close:   ks.Close,
		revoked: "a running server refuses it within 10 s",
	}, nil
}
