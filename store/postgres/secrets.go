package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gantryhq/gantry/core"
)

// revocationsChannel is the NOTIFY channel a revocation is announced on.
const revocationsChannel = "gantry_revocations"

// Revocations are followed every revocationPoll even without a notification: the fallback
// when notifications cannot reach this replica (a LISTEN connection lost, or a pooling proxy
// in the way). revocationSweep is how often expired revocations are forgotten.
const (
	revocationPoll  = 10 * time.Second
	revocationSweep = 10 * time.Minute
)

// Secret returns the secret stored under name, storing fresh first if there is none. Of
// replicas racing to create it, the first insert wins and every one gets its value.
func (db *DB) Secret(ctx context.Context, name string, fresh []byte) ([]byte, error) {
	if name == "" || len(fresh) == 0 {
		return nil, errors.New("a secret needs a name and a value")
	}
	var v []byte
	err := db.q(ctx).QueryRow(ctx, `WITH ins AS (
			INSERT INTO gantry_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING RETURNING value)
		SELECT value FROM ins UNION ALL SELECT value FROM gantry_secrets WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM ins)`,
		name, fresh).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		// Another replica's insert committed after this statement's snapshot: read it now.
		err = db.q(ctx).QueryRow(ctx, `SELECT value FROM gantry_secrets WHERE name = $1`, name).Scan(&v)
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s: %w", name, err)
	}
	return v, nil
}

// WorkerTokenStore is core.WorkerTokenStore on PostgreSQL: the signing key in gantry_secrets,
// and revocations in gantry_revocations with a copy in memory that WorkerRevoked answers
// from. The copy follows the other replicas' revocations: each is announced by NOTIFY in the
// transaction that writes it, and the follower also polls, in case a notification is missed.
type WorkerTokenStore struct {
	db  *DB
	log *slog.Logger

	mu      sync.RWMutex
	until   map[string]time.Time
	lastSeq int64 // the highest change seq read

	stop context.CancelFunc
	done chan struct{}
}

// WorkerTokens loads the revocations and starts following the other replicas' ones, until
// Close. log, when not nil, hears of a lost LISTEN connection.
func (db *DB) WorkerTokens(ctx context.Context, log *slog.Logger) (*WorkerTokenStore, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &WorkerTokenStore{db: db, log: log, until: map[string]time.Time{}, done: make(chan struct{})}
	if err := s.catchUp(ctx); err != nil {
		return nil, fmt.Errorf("loading worker-token revocations: %w", err)
	}
	followCtx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go s.follow(followCtx)
	return s, nil
}

// Close stops following revocations.
func (s *WorkerTokenStore) Close() {
	s.stop()
	<-s.done
}

// Secret implements core.SecretStore.
func (s *WorkerTokenStore) Secret(ctx context.Context, name string, fresh []byte) ([]byte, error) {
	return s.db.Secret(ctx, name, fresh)
}

// RevokeWorker records the revocation and announces it to the other replicas in one
// transaction, then makes it visible here.
func (s *WorkerTokenStore) RevokeWorker(ctx context.Context, worker string, until time.Time) error {
	if worker == "" {
		return errors.New("revoking the tokens of a worker without an id")
	}
	var kept time.Time
	err := pgx.BeginFunc(ctx, s.db.q(ctx), func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO gantry_revocations (worker, until) VALUES ($1, $2)
			ON CONFLICT (worker) DO UPDATE SET until = greatest(gantry_revocations.until, excluded.until),
				seq = nextval('gantry_revocations_seq')
			RETURNING until`, worker, until).Scan(&kept)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, revocationsChannel)
		return err
	})
	if err != nil {
		return fmt.Errorf("storing the revocation of worker %s: %w", worker, err)
	}
	s.mu.Lock()
	if old, ok := s.until[worker]; !ok || kept.After(old) {
		s.until[worker] = kept
	}
	s.mu.Unlock()
	return nil
}

// WorkerRevoked answers from memory.
func (s *WorkerTokenStore) WorkerRevoked(ctx context.Context, worker string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.RLock()
	_, ok := s.until[worker]
	s.mu.RUnlock()
	return ok, nil
}

// catchUp reads the revocations changed since the last it read.
func (s *WorkerTokenStore) catchUp(ctx context.Context) error {
	s.mu.RLock()
	last := s.lastSeq
	s.mu.RUnlock()
	rows, err := s.db.q(ctx).Query(ctx, `SELECT worker, until, seq FROM gantry_revocations WHERE seq > $1 AND until > now() ORDER BY seq`, last)
	if err != nil {
		return err
	}
	var (
		worker string
		until  time.Time
		seq    int64
	)
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err = pgx.ForEachRow(rows, []any{&worker, &until, &seq}, func() error {
		if old, ok := s.until[worker]; !ok || until.After(old) {
			s.until[worker] = until
		}
		s.lastSeq = max(s.lastSeq, seq)
		return nil
	})
	return err
}

// sweep forgets the revocations whose tokens have expired, here and in the table.
func (s *WorkerTokenStore) sweep(ctx context.Context, now time.Time) {
	s.mu.Lock()
	for w, until := range s.until {
		if !until.After(now) {
			delete(s.until, w)
		}
	}
	s.mu.Unlock()
	if _, err := s.db.q(ctx).Exec(ctx, `DELETE FROM gantry_revocations WHERE until <= now()`); err != nil && ctx.Err() == nil {
		s.log.Warn("forgetting expired worker-token revocations", "err", err)
	}
}

// follow catches up with the revocations on each notification and every revocationPoll
// (and forgets expired ones every revocationSweep), until ctx ends.
func (s *WorkerTokenStore) follow(ctx context.Context) {
	defer close(s.done)
	nextSweep := time.Now().Add(revocationSweep)
	s.db.follow(ctx, revocationsChannel, revocationPoll, s.log, func(ctx context.Context, _ string, _ bool) error {
		if err := s.catchUp(ctx); err != nil {
			return err
		}
		if now := time.Now(); now.After(nextSweep) {
			s.sweep(ctx, now)
			nextSweep = now.Add(revocationSweep)
		}
		return nil
	})
}

var _ core.WorkerTokenStore = (*WorkerTokenStore)(nil)
