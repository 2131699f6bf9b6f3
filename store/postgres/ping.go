package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pinger tells whether PostgreSQL answers, for a replica's /healthz: over a connection of its
// own, so that a pool busy with requests does not make a healthy store look down, and a lost
// connection is dialled again at the next check. Checks are one at a time.
type Pinger struct {
	cfg *pgx.ConnConfig

	mu   sync.Mutex
	conn *pgx.Conn // nil until the first check, and after a failed one
}

// Pinger returns a Pinger of db's database; Close it when done.
func (db *DB) Pinger() *Pinger {
	return &Pinger{cfg: db.Pool.Config().ConnConfig.Copy()}
}

// Ping connects if need be and sends an empty statement; an error when PostgreSQL does not
// answer before ctx ends.
func (p *Pinger) Ping(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil || p.conn.IsClosed() {
		conn, err := pgx.ConnectConfig(ctx, p.cfg)
		if err != nil {
			return fmt.Errorf("connecting to PostgreSQL at %s:%d: %w", p.cfg.Host, p.cfg.Port, err)
		}
		p.conn = conn
	}
	if err := p.conn.Ping(ctx); err != nil {
		p.closeConn()
		return fmt.Errorf("PostgreSQL at %s:%d did not answer: %w", p.cfg.Host, p.cfg.Port, err)
	}
	return nil
}

// Close closes the connection.
func (p *Pinger) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeConn()
}

func (p *Pinger) closeConn() {
	if p.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.conn.Close(ctx)
	p.conn = nil
}
