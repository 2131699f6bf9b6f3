package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gantryhq/gantry/core"
)

// A table of owned records (endpoints, templates): id, owner, creation time and the record as
// JSON. Listings walk the (owner, created_at, id) index.
type recordTable struct {
	name, kind string // table, and the record kind for messages
	// put and del of a table with a channel announce the id there (NOTIFY), in their
	// statement, so that every replica hears of the change.
	put, get  string // statements
	list, del string
}

func newRecordTable(name, kind, channel string) recordTable {
	t := recordTable{
		name: name, kind: kind,
		put: `INSERT INTO ` + name + ` (id, owner, created_at, body) VALUES ($1, $2, $3, $4)
			ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, created_at = excluded.created_at, body = excluded.body`,
		get: `SELECT body FROM ` + name + ` WHERE id = $1`,
		list: `SELECT id, created_at, body FROM ` + name + `
			WHERE owner = $1 AND ($2::boolean OR (created_at, id) > ($3, $4))
			ORDER BY created_at, id LIMIT $5`,
		del: `DELETE FROM ` + name + ` WHERE id = $1`,
	}
	if channel != "" {
		t.put = `WITH w AS (` + t.put + ` RETURNING id) SELECT pg_notify('` + channel + `', id) FROM w`
		t.del = `WITH d AS (` + t.del + ` RETURNING id) SELECT pg_notify('` + channel + `', id) FROM d`
	}
	return t
}

var (
	endpointTable = newRecordTable("gantry_endpoints", "endpoint", endpointsChannel)
	templateTable = newRecordTable("gantry_templates", "template", "")
)

// cursorRE is the form of a listing cursor: the last record's creation time (Unix
// microseconds with the sign bit flipped, hex) and its id.
var cursorRE = regexp.MustCompile(`^[0-9a-f]{16}[a-z0-9]{1,64}$`)

func cursorOf(created time.Time, id string) string {
	return fmt.Sprintf("%016x%s", uint64(created.UnixMicro())^(1<<63), id)
}

func parseCursor(c string) (time.Time, string, error) {
	if !cursorRE.MatchString(c) {
		return time.Time{}, "", core.BadCursor(c)
	}
	u, err := strconv.ParseUint(c[:16], 16, 64)
	if err != nil {
		return time.Time{}, "", core.BadCursor(c)
	}
	return time.UnixMicro(int64(u ^ (1 << 63))), c[16:], nil
}

func putRecord(ctx context.Context, db *DB, t recordTable, id, owner string, created time.Time, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := db.q(ctx).Exec(ctx, t.put, id, owner, created, body); err != nil {
		return fmt.Errorf("storing %s %s: %w", t.kind, id, err)
	}
	return nil
}

func getRecord[T any](ctx context.Context, db *DB, t recordTable, id string) (T, error) {
	var v T
	var body []byte
	err := db.q(ctx).QueryRow(ctx, t.get, id).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return v, core.ErrNotFound
	}
	if err != nil {
		return v, fmt.Errorf("reading %s %s: %w", t.kind, id, err)
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return v, fmt.Errorf("decoding %s %s: %w", t.kind, id, err)
	}
	return v, nil
}

func listRecords[T any](ctx context.Context, db *DB, t recordTable, owner, cursor string, limit int) ([]T, string, error) {
	var after time.Time
	var afterID string
	if cursor != "" {
		var err error
		if after, afterID, err = parseCursor(cursor); err != nil {
			return nil, "", err
		}
	}
	limit = max(limit, 1)
	rows, err := db.q(ctx).Query(ctx, t.list, owner, cursor == "", after, afterID, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("listing %ss of %s: %w", t.kind, owner, err)
	}
	out, next, n := []T{}, "", 0
	var (
		id      string
		created time.Time
		body    []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &created, &body}, func() error {
		n++
		if len(out) == limit {
			return nil // one more exists: the page ends at the last one kept
		}
		var v T
		if err := json.Unmarshal(body, &v); err != nil {
			return fmt.Errorf("decoding %s %s: %w", t.kind, id, err)
		}
		out = append(out, v)
		if len(out) == limit {
			next = cursorOf(created, id)
		}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("listing %ss of %s: %w", t.kind, owner, err)
	}
	if n <= limit {
		next = ""
	}
	return out, next, nil
}

func deleteRecord(ctx context.Context, db *DB, t recordTable, id string) error {
	tag, err := db.q(ctx).Exec(ctx, t.del, id)
	if err != nil {
		return fmt.Errorf("deleting %s %s: %w", t.kind, id, err)
	}
	if tag.RowsAffected() == 0 {
		return core.ErrNotFound
	}
	return nil
}

// PutEndpoint stores an endpoint.
func (db *DB) PutEndpoint(ctx context.Context, e core.Endpoint) error {
	return putRecord(ctx, db, endpointTable, e.ID, e.Owner, e.CreatedAt, e)
}

// GetEndpoint reads an endpoint.
func (db *DB) GetEndpoint(ctx context.Context, id string) (core.Endpoint, error) {
	return getRecord[core.Endpoint](ctx, db, endpointTable, id)
}

// ListEndpoints lists an owner's endpoints in creation order.
func (db *DB) ListEndpoints(ctx context.Context, owner, cursor string, limit int) ([]core.Endpoint, string, error) {
	return listRecords[core.Endpoint](ctx, db, endpointTable, owner, cursor, limit)
}

// DeleteEndpoint removes an endpoint.
func (db *DB) DeleteEndpoint(ctx context.Context, id string) error {
	return deleteRecord(ctx, db, endpointTable, id)
}

// ScanEndpoints calls fn for every endpoint of every owner.
func (db *DB) ScanEndpoints(ctx context.Context, fn func(core.Endpoint) error) error {
	rows, err := db.q(ctx).Query(ctx, `SELECT body FROM gantry_endpoints ORDER BY created_at, id`)
	if err != nil {
		return fmt.Errorf("reading endpoints: %w", err)
	}
	var body []byte
	_, err = pgx.ForEachRow(rows, []any{&body}, func() error {
		var e core.Endpoint
		if err := json.Unmarshal(body, &e); err != nil {
			return fmt.Errorf("decoding an endpoint: %w", err)
		}
		return fn(e)
	})
	return err
}

// PutTemplate stores a template.
func (db *DB) PutTemplate(ctx context.Context, t core.Template) error {
	return putRecord(ctx, db, templateTable, t.ID, t.Owner, t.CreatedAt, t)
}

// GetTemplate reads a template.
func (db *DB) GetTemplate(ctx context.Context, id string) (core.Template, error) {
	return getRecord[core.Template](ctx, db, templateTable, id)
}

// ListTemplates lists an owner's templates in creation order.
func (db *DB) ListTemplates(ctx context.Context, owner, cursor string, limit int) ([]core.Template, string, error) {
	return listRecords[core.Template](ctx, db, templateTable, owner, cursor, limit)
}

// DeleteTemplate removes a template.
func (db *DB) DeleteTemplate(ctx context.Context, id string) error {
	return deleteRecord(ctx, db, templateTable, id)
}

var (
	_ core.EndpointStore = (*DB)(nil)
	_ core.TemplateStore = (*DB)(nil)
)
