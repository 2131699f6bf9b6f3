// Package memory keeps the store ports of core (except jobs) in memory: endpoints, templates,
// API keys and users, the usage ledger, produced files, and named secrets and worker-token
// revocations. It is for fast unit tests: it keeps
// nothing across a restart, and otherwise passes the same storetest suites as the durable
// stores. Records are kept JSON-encoded, as the durable stores keep them, so that nothing a
// caller holds aliases what the store holds.
package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/core"
)

// Store is an in-memory store. The zero value is not ready; use New.
type Store struct {
	mu        sync.Mutex // guards every map below
	endpoints map[string]record
	templates map[string]record
	volumes   map[string]record    // network volumes (volumes.go)
	keys      map[string][]byte    // key hash -> JSON core.Key
	users     map[string][]byte    // user name -> JSON core.User
	usage     map[string][]byte    // job id -> JSON core.Usage
	files     map[string]file      // file name -> contents
	secrets   map[string][]byte    // name -> secret (secrets.go)
	revoked   map[string]time.Time // worker id -> when its revoked tokens expire
	history   map[historyKey]core.HistoryCounts
}

// New returns an empty store.
func New() *Store {
	return &Store{
		endpoints: map[string]record{},
		templates: map[string]record{},
		volumes:   map[string]record{},
		keys:      map[string][]byte{},
		users:     map[string][]byte{},
		usage:     map[string][]byte{},
		files:     map[string]file{},
		secrets:   map[string][]byte{},
		revoked:   map[string]time.Time{},
		history:   map[historyKey]core.HistoryCounts{},
	}
}

// record is a stored endpoint or template: what listing needs, and the record itself.
type record struct {
	owner   string
	created time.Time
	id      string
	val     []byte // JSON
}

// cursor names the place of a record in its owner's list: creation time (Unix seconds and
// nanoseconds, so that times before 1970 and the zero time work), then id.
func (r record) cursor() string {
	return strconv.FormatInt(r.created.Unix(), 10) + "." + strconv.Itoa(r.created.Nanosecond()) + "." + r.id
}

// parseCursor reads a cursor back into a record's place; ok is false for anything else.
func parseCursor(c string) (at time.Time, id string, ok bool) {
	secs, rest, ok1 := strings.Cut(c, ".")
	nanos, id, ok2 := strings.Cut(rest, ".")
	s, err1 := strconv.ParseInt(secs, 10, 64)
	n, err2 := strconv.Atoi(nanos)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || n < 0 || n > 999_999_999 || id == "" ||
		strings.ContainsFunc(id, func(r rune) bool { return !('a' <= r && r <= 'z' || '0' <= r && r <= '9') }) {
		return time.Time{}, "", false
	}
	return time.Unix(s, int64(n)), id, true
}

// compare orders records by creation time, then id.
func compare(aAt time.Time, aID string, bAt time.Time, bID string) int {
	return cmp.Or(aAt.Compare(bAt), strings.Compare(aID, bID))
}

func put[T any](ctx context.Context, s *Store, m map[string]record, id, owner string, created time.Time, v T) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	val, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m[id] = record{owner: owner, created: created, id: id, val: val}
	return nil
}

func get[T any](ctx context.Context, s *Store, m map[string]record, id string) (T, error) {
	var v T
	if err := ctx.Err(); err != nil {
		return v, err
	}
	s.mu.Lock()
	r, ok := m[id]
	s.mu.Unlock()
	if !ok {
		return v, core.ErrNotFound
	}
	return v, json.Unmarshal(r.val, &v)
}

func list[T any](ctx context.Context, s *Store, m map[string]record, owner, cursor string, limit int) ([]T, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	afterAt, afterID, ok := parseCursor(cursor)
	if cursor != "" && !ok {
		return nil, "", core.BadCursor(cursor)
	}
	s.mu.Lock()
	var recs []record
	for _, r := range m {
		if r.owner == owner && (cursor == "" || compare(r.created, r.id, afterAt, afterID) > 0) {
			recs = append(recs, r)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(recs, func(a, b record) int { return compare(a.created, a.id, b.created, b.id) })
	next := ""
	if len(recs) > limit {
		recs = recs[:max(limit, 0)]
		if len(recs) > 0 {
			next = recs[len(recs)-1].cursor()
		}
	}
	out := make([]T, len(recs))
	for i, r := range recs {
		if err := json.Unmarshal(r.val, &out[i]); err != nil {
			return nil, "", fmt.Errorf("record %s: %w", r.id, err)
		}
	}
	return out, next, nil
}

func del(ctx context.Context, s *Store, m map[string]record, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := m[id]; !ok {
		return core.ErrNotFound
	}
	delete(m, id)
	return nil
}

// PutEndpoint stores an endpoint.
func (s *Store) PutEndpoint(ctx context.Context, e core.Endpoint) error {
	return put(ctx, s, s.endpoints, e.ID, e.Owner, e.CreatedAt, e)
}

// GetEndpoint reads an endpoint.
func (s *Store) GetEndpoint(ctx context.Context, id string) (core.Endpoint, error) {
	return get[core.Endpoint](ctx, s, s.endpoints, id)
}

// ListEndpoints lists an owner's endpoints in creation order.
func (s *Store) ListEndpoints(ctx context.Context, owner, cursor string, limit int) ([]core.Endpoint, string, error) {
	return list[core.Endpoint](ctx, s, s.endpoints, owner, cursor, limit)
}

// DeleteEndpoint removes an endpoint.
func (s *Store) DeleteEndpoint(ctx context.Context, id string) error {
	return del(ctx, s, s.endpoints, id)
}

// PutTemplate stores a template.
func (s *Store) PutTemplate(ctx context.Context, t core.Template) error {
	return put(ctx, s, s.templates, t.ID, t.Owner, t.CreatedAt, t)
}

// GetTemplate reads a template.
func (s *Store) GetTemplate(ctx context.Context, id string) (core.Template, error) {
	return get[core.Template](ctx, s, s.templates, id)
}

// ListTemplates lists an owner's templates in creation order.
func (s *Store) ListTemplates(ctx context.Context, owner, cursor string, limit int) ([]core.Template, string, error) {
	return list[core.Template](ctx, s, s.templates, owner, cursor, limit)
}

// DeleteTemplate removes a template.
func (s *Store) DeleteTemplate(ctx context.Context, id string) error {
	return del(ctx, s, s.templates, id)
}

var (
	_ core.EndpointStore = (*Store)(nil)
	_ core.TemplateStore = (*Store)(nil)
)
