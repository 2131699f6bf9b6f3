// Package pebble is Gantry's embedded store on Pebble: endpoints and templates, each under a
// primary key with a per-owner index in creation order; jobs; the usage ledger of
// ready-made models, one record per job with a per-owner index in completion order; and named
// secrets and worker-token revocations. Every management, usage, secret and revocation write is
// synced before it returns.
package pebble

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/gantryhq/gantry/core"
)

// Store is the Pebble-backed store.
type Store struct {
	db *pebble.DB
	mu sync.Mutex // serialises management writes (put and delete read the old record first)

	usageMu   [16]sync.Mutex // AddUsage's check and write, striped by job id: other jobs' syncs group
	historyMu sync.Mutex     // AddHistory's reads and write of the counters it adds to

	rev revocations // named secrets and worker-token revocations (secrets.go)

	files *inputFiles // inputs of InputFileBytes or more (inputs.go)

	closeOnce sync.Once
	gate      gate // every operation passes it; Close shuts it first
}

// Open opens (creating if needed) the store in dir. Only one process may hold it open.
func Open(dir string) (*Store, error) {
	db, err := pebble.Open(dir, &pebble.Options{
		Logger: quietLogger{},
		// A job queue writes far more than it reads: larger memtables and a higher L0 stop
		// threshold keep bursts of submissions from stalling on compactions (each memtable is
		// 32 MB; at most four wait to flush).
		MemTableSize:                32 << 20,
		MemTableStopWritesThreshold: 4,
		L0CompactionThreshold:       4,
		L0StopWritesThreshold:       64,
		LBaseMaxBytes:               256 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("opening the store in %s: %w", dir, err)
	}
	s := &Store{db: db}
	if s.files, err = openInputFiles(dir, db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("opening the store in %s: %w", dir, err)
	}
	if err := s.loadRevocations(time.Now()); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("opening the store in %s: %w", dir, err)
	}
	return s, nil
}

// Close waits for the operations in flight, then flushes and closes the store; later calls do
// nothing, and operations after it return ErrClosed.
func (s *Store) Close() error {
	err := error(nil)
	s.closeOnce.Do(func() {
		s.gate.close()
		err = s.db.Close()
	})
	return err
}

// A family is one record type: its primary-key prefix and its per-owner index prefix.
type family struct{ primary, index string }

var (
	endpoints = family{"ep/", "epo/"}
	templates = family{"tp/", "tpo/"}
)

func (f family) key(id string) []byte { return []byte(f.primary + id) }

// indexKey orders an owner's records by creation time, then id. The part after the owner is
// the record's cursor.
func (f family) indexKey(owner string, created time.Time, id string) []byte {
	return []byte(f.index + owner + "\x00" + cursorOf(created, id))
}

// cursorOf orders by creation time (seconds with the sign bit flipped, so times before 1970
// sort first, then nanoseconds), then id.
func cursorOf(created time.Time, id string) string {
	return fmt.Sprintf("%016x%08x%s", uint64(created.Unix())^(1<<63), created.Nanosecond(), id)
}

const cursorTimeLen = 24

var cursorRE = regexp.MustCompile(`^[0-9a-f]{24}[a-z0-9]{1,64}$`)

// put writes a record and its index entry, removing the old index entry when the owner or
// creation time changed. mu keeps the read of the old record and the write together.
func (s *Store) put(f family, id, owner string, created time.Time, v any, old func() (string, time.Time, error)) error {
	val, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := s.gate.enter(); err != nil {
		return err
	}
	defer s.gate.leave()
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.db.NewBatch()
	defer func() { _ = b.Close() }()
	oldOwner, oldCreated, err := old()
	switch {
	case err == nil:
		if oldKey := f.indexKey(oldOwner, oldCreated, id); string(oldKey) != string(f.indexKey(owner, created, id)) {
			_ = b.Delete(oldKey, nil)
		}
	case !errors.Is(err, core.ErrNotFound):
		return err
	}
	_ = b.Set(f.key(id), val, nil)
	_ = b.Set(f.indexKey(owner, created, id), nil, nil)
	return b.Commit(pebble.Sync)
}

func get[T any](s *Store, f family, id string) (T, error) {
	var v T
	return v, s.getJSON(f.key(id), &v)
}

// getWith hands the value at key to decode (which must not keep it), or returns
// core.ErrNotFound.
func (s *Store) getWith(key []byte, decode func([]byte) error) error {
	if err := s.gate.enter(); err != nil {
		return err
	}
	defer s.gate.leave()
	val, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return core.ErrNotFound
	}
	if err != nil {
		return err
	}
	defer func() { _ = closer.Close() }()
	return decode(val)
}

// getBytes returns a copy of the value at key, or core.ErrNotFound.
func (s *Store) getBytes(key []byte) (out []byte, err error) {
	return out, s.getWith(key, func(b []byte) error { out = append([]byte(nil), b...); return nil })
}

// getJSON decodes the value at key into v, or returns core.ErrNotFound.
func (s *Store) getJSON(key []byte, v any) error {
	return s.getWith(key, func(b []byte) error { return json.Unmarshal(b, v) })
}

// scanWith hands every value under prefix (a prefix ending in '/') to fn, in key order.
func (s *Store) scanWith(prefix string, fn func(key, val []byte) error) error {
	upper := []byte(prefix)
	upper[len(upper)-1]++ // the first key past the prefix
	if err := s.gate.enter(); err != nil {
		return err
	}
	defer s.gate.leave()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: upper})
	if err != nil {
		return err
	}
	defer func() { _ = it.Close() }()
	for ok := it.First(); ok; ok = it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

// scan decodes every JSON value under prefix and calls fn with it.
func scan[T any](s *Store, prefix string, fn func(*T) error) error {
	return s.scanWith(prefix, func(_, val []byte) error {
		var v T
		if err := json.Unmarshal(val, &v); err != nil {
			return err
		}
		return fn(&v)
	})
}

func list[T any](s *Store, f family, owner, cursor string, limit int) ([]T, string, error) {
	if cursor != "" && !cursorRE.MatchString(cursor) {
		return nil, "", core.BadCursor(cursor)
	}
	prefix := f.index + owner + "\x00"
	lower := []byte(prefix)
	if cursor != "" {
		lower = append([]byte(prefix+cursor), 0) // strictly after the cursor
	}
	if err := s.gate.enter(); err != nil {
		return nil, "", err
	}
	defer s.gate.leave()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: []byte(f.index + owner + "\x01")})
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = it.Close() }()
	out, last := []T{}, ""
	for ok := it.First(); ok; ok = it.Next() {
		c := string(it.Key()[len(prefix):])
		if len(out) == limit {
			return out, last, nil // one more exists: the page ends at last
		}
		v, err := get[T](s, f, c[cursorTimeLen:])
		if errors.Is(err, core.ErrNotFound) {
			continue // deleted between reading the index and the record
		}
		if err != nil {
			return nil, "", err
		}
		out, last = append(out, v), c
	}
	return out, "", it.Error()
}

// del removes a record and its index entry. mu keeps the read of the record (for the index
// entry's owner and creation time) and the delete together: read before taking mu, a put in
// between would leave its index entry behind, listing the id under an owner it has left.
func (s *Store) del(f family, id string, old func() (string, time.Time, error)) error {
	if err := s.gate.enter(); err != nil {
		return err
	}
	defer s.gate.leave()
	s.mu.Lock()
	defer s.mu.Unlock()
	owner, created, err := old()
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer func() { _ = b.Close() }()
	_ = b.Delete(f.key(id), nil)
	_ = b.Delete(f.indexKey(owner, created, id), nil)
	return b.Commit(pebble.Sync)
}

// PutEndpoint stores an endpoint.
func (s *Store) PutEndpoint(ctx context.Context, e core.Endpoint) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.put(endpoints, e.ID, e.Owner, e.CreatedAt, e, func() (string, time.Time, error) {
		old, err := get[core.Endpoint](s, endpoints, e.ID)
		return old.Owner, old.CreatedAt, err
	})
}

// GetEndpoint reads an endpoint.
func (s *Store) GetEndpoint(ctx context.Context, id string) (core.Endpoint, error) {
	if err := ctx.Err(); err != nil {
		return core.Endpoint{}, err
	}
	return get[core.Endpoint](s, endpoints, id)
}

// ListEndpoints lists an owner's endpoints in creation order.
func (s *Store) ListEndpoints(ctx context.Context, owner, cursor string, limit int) ([]core.Endpoint, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	return list[core.Endpoint](s, endpoints, owner, cursor, limit)
}

// DeleteEndpoint removes an endpoint.
func (s *Store) DeleteEndpoint(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.del(endpoints, id, func() (string, time.Time, error) {
		e, err := get[core.Endpoint](s, endpoints, id)
		return e.Owner, e.CreatedAt, err
	})
}

// PutTemplate stores a template.
func (s *Store) PutTemplate(ctx context.Context, t core.Template) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.put(templates, t.ID, t.Owner, t.CreatedAt, t, func() (string, time.Time, error) {
		old, err := get[core.Template](s, templates, t.ID)
		return old.Owner, old.CreatedAt, err
	})
}

// GetTemplate reads a template.
func (s *Store) GetTemplate(ctx context.Context, id string) (core.Template, error) {
	if err := ctx.Err(); err != nil {
		return core.Template{}, err
	}
	return get[core.Template](s, templates, id)
}

// ListTemplates lists an owner's templates in creation order.
func (s *Store) ListTemplates(ctx context.Context, owner, cursor string, limit int) ([]core.Template, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	return list[core.Template](s, templates, owner, cursor, limit)
}

// DeleteTemplate removes a template.
func (s *Store) DeleteTemplate(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.del(templates, id, func() (string, time.Time, error) {
		t, err := get[core.Template](s, templates, id)
		return t.Owner, t.CreatedAt, err
	})
}

// quietLogger keeps Pebble's informational chatter out of Gantry's log; errors still surface
// through returned errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

var (
	_ core.EndpointStore = (*Store)(nil)
	_ core.TemplateStore = (*Store)(nil)
)

// ScanEndpoints calls fn for every endpoint of every owner.
func (s *Store) ScanEndpoints(ctx context.Context, fn func(core.Endpoint) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return scan(s, endpoints.primary, func(e *core.Endpoint) error { return fn(*e) })
}
