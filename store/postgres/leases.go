package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gantryhq/gantry/core"
)

// Leases is core.Leases on PostgreSQL: a row per lease in gantry_leases, judged by the
// database's clock, so that the replicas' clocks need not agree. It takes no session lock:
// every call is one statement or one transaction, which works through PgBouncer's
// transaction pooling.
type Leases struct{ db *DB }

// Leases returns the leader leases kept in db.
func (db *DB) Leases() *Leases { return &Leases{db} }

// Acquire takes or renews the lease in one upsert: it changes the row only when holder holds
// it or it has expired, and starts a new term (epoch + 1) unless holder is renewing a live
// term of its own. When another holder has it, a second statement reads that holder's term.
func (l *Leases) Acquire(ctx context.Context, name, holder, address string, ttl time.Duration) (core.Lease, error) {
	if name == "" || holder == "" || ttl <= 0 {
		return core.Lease{}, fmt.Errorf("acquiring a lease needs a name, a holder and a positive ttl (got %q, %q, %v)", name, holder, ttl)
	}
	out := core.Lease{Name: name, Holder: holder, Address: address}
	err := l.db.q(ctx).QueryRow(ctx, `INSERT INTO gantry_leases AS l (name, holder, epoch, expires_at, address)
			VALUES ($1, $2, 1, clock_timestamp() + $3::bigint * interval '1 microsecond', $4)
		ON CONFLICT (name) DO UPDATE SET holder = $2, address = $4,
			epoch = CASE WHEN l.holder = $2 AND l.expires_at > clock_timestamp() THEN l.epoch ELSE l.epoch + 1 END,
			expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
		WHERE l.holder = $2 OR l.expires_at <= clock_timestamp()
		RETURNING epoch, expires_at`, name, holder, ttl.Microseconds(), address).Scan(&out.Epoch, &out.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return l.held(ctx, name)
	}
	if err != nil {
		return core.Lease{}, fmt.Errorf("acquiring lease %s: %w", name, err)
	}
	return out, nil
}

// held returns the term of the holder that refused an Acquire, with core.ErrLeaseHeld.
func (l *Leases) held(ctx context.Context, name string) (core.Lease, error) {
	cur := core.Lease{Name: name}
	err := l.db.q(ctx).QueryRow(ctx, `SELECT holder, epoch, expires_at, address FROM gantry_leases WHERE name = $1`,
		name).Scan(&cur.Holder, &cur.Epoch, &cur.Expires, &cur.Address)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) { // no row: released and deleted since; none to name
		return core.Lease{}, fmt.Errorf("reading lease %s: %w", name, err)
	}
	return cur, core.ErrLeaseHeld
}

// Release ends the term now, if it is still current.
func (l *Leases) Release(ctx context.Context, lease core.Lease) error {
	_, err := l.db.q(ctx).Exec(ctx, `UPDATE gantry_leases SET expires_at = least(expires_at, clock_timestamp())
		WHERE name = $1 AND holder = $2 AND epoch = $3`, lease.Name, lease.Holder, lease.Epoch)
	if err != nil {
		return fmt.Errorf("releasing lease %s: %w", lease.Name, err)
	}
	return nil
}

// Fence runs write in a transaction that first locks the lease row (FOR SHARE) and checks
// that lease is its current, unexpired term: a new term's Acquire waits for the transaction
// to end, so the check holds for all of write. The store's own calls made with write's ctx
// join the transaction, and commit or roll back with it.
func (l *Leases) Fence(ctx context.Context, lease core.Lease, write func(ctx context.Context) error) error {
	return pgx.BeginFunc(ctx, l.db.q(ctx), func(tx pgx.Tx) error {
		var current bool
		err := tx.QueryRow(ctx, `SELECT holder = $2 AND epoch = $3 AND expires_at > clock_timestamp()
			FROM gantry_leases WHERE name = $1 FOR SHARE`, lease.Name, lease.Holder, lease.Epoch).Scan(&current)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !current) {
			return core.ErrDeposed
		}
		if err != nil {
			return fmt.Errorf("checking lease %s: %w", lease.Name, err)
		}
		return write(context.WithValue(ctx, txKey{}, tx))
	})
}

// Live returns the unexpired leases whose names begin with prefix, by the database's clock.
// It also deletes that prefix's rows expired over a day ago: presence leases are named after
// replicas that come and go, and a gone replica's row is never acquired again. The leader's
// lease ("scheduler") keeps its row for ever, for its epoch.
func (l *Leases) Live(ctx context.Context, prefix string) ([]core.Lease, error) {
	like := strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(prefix) + "%"
	rows, err := l.db.q(ctx).Query(ctx, `WITH gone AS (DELETE FROM gantry_leases
			WHERE name LIKE $1 AND expires_at < clock_timestamp() - interval '1 day')
		SELECT name, holder, epoch, expires_at, address FROM gantry_leases
		WHERE name LIKE $1 AND expires_at > clock_timestamp() ORDER BY name`, like)
	if err != nil {
		return nil, fmt.Errorf("reading the leases %s*: %w", prefix, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.Lease, error) {
		var le core.Lease
		err := r.Scan(&le.Name, &le.Holder, &le.Epoch, &le.Expires, &le.Address)
		return le, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the leases %s*: %w", prefix, err)
	}
	return out, nil
}

var _ core.Leases = (*Leases)(nil)

// txKey is the context key of the transaction a fenced write runs in.
type txKey struct{}

// querier is what the store's calls need of a connection: the pool, or a fenced write's
// transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// q returns the transaction of the fenced write ctx belongs to (Leases.Fence), else the pool.
// The store's methods all query through it, so that any of them can be fenced.
func (db *DB) q(ctx context.Context) querier {
	if tx, ok := ctx.Value(txKey{}).(pgx.Tx); ok {
		return tx
	}
	return db.Pool
}
