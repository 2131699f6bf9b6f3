package pebble

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/gantryhq/gantry/core"
)

// Named secrets live under sec/<name>; worker-token revocations under wrv/<worker id>, each
// holding when the revoked tokens expire (Unix nanoseconds, big-endian). Revocations are also
// kept in memory, loaded at Open: every worker request asks whether its worker is revoked, and
// that must cost a map lookup, not a read.
const (
	secretPrefix     = "sec/"
	revocationPrefix = "wrv/"
)

// revocations is the in-memory copy of the revocations on disk.
type revocations struct {
	secretMu sync.Mutex // Secret's read and create together

	writeMu   sync.Mutex   // RevokeWorker's disk write and map update, one at a time
	mu        sync.RWMutex // the map, held only to read or change it: never across a disk write
	until     map[string]int64
	nextSweep int // len(until) at which RevokeWorker next drops expired revocations; under writeMu
	minSweep  int // the fewest revocations worth sweeping for expired ones
}

// minSweep is the fewest revocations worth sweeping for expired ones: a sweep walks them all.
const minSweep = 1024

// loadRevocations reads the stored revocations, dropping those expired by now.
func (s *Store) loadRevocations(now time.Time) error {
	s.rev.until = map[string]int64{}
	s.rev.minSweep = minSweep
	var expired [][]byte
	err := s.scanWith(revocationPrefix, func(key, val []byte) error {
		if len(val) != 8 {
			return fmt.Errorf("revocation %q: %d bytes; want 8", key, len(val))
		}
		until := int64(binary.BigEndian.Uint64(val))
		if until <= now.UnixNano() {
			expired = append(expired, append([]byte(nil), key...))
			return nil
		}
		s.rev.until[string(key[len(revocationPrefix):])] = until
		return nil
	})
	if err != nil {
		return fmt.Errorf("loading worker-token revocations: %w", err)
	}
	s.rev.nextSweep = max(2*len(s.rev.until), s.rev.minSweep)
	if len(expired) == 0 {
		return nil
	}
	b := s.db.NewBatch()
	defer func() { _ = b.Close() }()
	for _, k := range expired {
		_ = b.Delete(k, nil)
	}
	return b.Commit(pebble.NoSync) // forgetting an expired revocation again after a crash is harmless
}

// Secret returns the secret stored under name, storing fresh (synced) first if there is none.
func (s *Store) Secret(ctx context.Context, name string, fresh []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if name == "" || len(fresh) == 0 {
		return nil, errors.New("a secret needs a name and a value")
	}
	s.rev.secretMu.Lock()
	defer s.rev.secretMu.Unlock()
	key := []byte(secretPrefix + name)
	v, err := s.getBytes(key)
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, core.ErrNotFound) {
		return nil, fmt.Errorf("reading secret %s: %w", name, err)
	}
	if err := s.gate.enter(); err != nil {
		return nil, err
	}
	defer s.gate.leave()
	if err := s.db.Set(key, fresh, pebble.Sync); err != nil {
		return nil, fmt.Errorf("storing secret %s: %w", name, err)
	}
	return append([]byte(nil), fresh...), nil
}

// RevokeWorker records the revocation, synced, then makes it visible to WorkerRevoked.
func (s *Store) RevokeWorker(ctx context.Context, worker string, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if worker == "" {
		return errors.New("revoking the tokens of a worker without an id")
	}
	if err := s.gate.enter(); err != nil {
		return err
	}
	defer s.gate.leave()
	s.rev.writeMu.Lock()
	defer s.rev.writeMu.Unlock()
	u := until.UnixNano()
	s.rev.mu.RLock()
	old, ok := s.rev.until[worker]
	sweep := len(s.rev.until)+1 >= s.rev.nextSweep // amortised: the map at most doubles between sweeps
	var expired []string
	if sweep {
		now := time.Now().UnixNano()
		for w, t := range s.rev.until {
			if t <= now && w != worker {
				expired = append(expired, w)
			}
		}
	}
	s.rev.mu.RUnlock()
	if ok && old >= u && len(expired) == 0 {
		return nil
	}
	b := s.db.NewBatch()
	defer func() { _ = b.Close() }()
	_ = b.Set([]byte(revocationPrefix+worker), binary.BigEndian.AppendUint64(nil, uint64(max(u, old))), nil)
	for _, w := range expired {
		_ = b.Delete([]byte(revocationPrefix+w), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("storing the revocation of worker %s: %w", worker, err)
	}
	// Visible only once durable: a revocation a crash could lose is never acted on.
	s.rev.mu.Lock()
	for _, w := range expired {
		delete(s.rev.until, w)
	}
	s.rev.until[worker] = max(u, old)
	if sweep {
		s.rev.nextSweep = max(2*len(s.rev.until), s.rev.minSweep)
	}
	s.rev.mu.Unlock()
	return nil
}

// WorkerRevoked answers from memory.
func (s *Store) WorkerRevoked(ctx context.Context, worker string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.rev.mu.RLock()
	_, ok := s.rev.until[worker]
	s.rev.mu.RUnlock()
	return ok, nil
}

var _ core.WorkerTokenStore = (*Store)(nil)
