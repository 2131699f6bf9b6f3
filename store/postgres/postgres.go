// Package postgres stores Gantry's shared state in PostgreSQL, so that several `gantry serve`
// replicas can share it (see DESIGN.md, "Scale-out"). It implements the same store contracts
// as the embedded Pebble store and passes the same store/storetest suites.
package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is an open PostgreSQL store: a connection pool over a migrated schema.
type DB struct {
	Pool *pgxpool.Pool
}

// Open connects to the database that url names and applies the embedded migrations that it
// lacks. Replicas starting at the same moment are safe: migrations run one at a time.
func Open(ctx context.Context, url string) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store URL: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	if err := Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return &DB{Pool: pool}, nil
}

// Close closes the pool.
func (db *DB) Close() { db.Pool.Close() }
