package pebble

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/gantryhq/gantry/core"
)

// The usage ledger lives under use/<job id> (one record per job: AddUsage checks it) and
// uso/<owner>\x00<time><job id> (the same record, ordered by completion time for reports).
const (
	usagePrefix      = "use/"
	usageIndexPrefix = "uso/"
)

func usageIndexKey(owner string, at time.Time, jobID string) []byte {
	return []byte(usageIndexPrefix + owner + "\x00" + cursorOf(at, jobID))
}

// AddUsage stores u unless the job already has a record, synced before it returns.
func (s *Store) AddUsage(ctx context.Context, u core.Usage) (core.Usage, bool, error) {
	if err := ctx.Err(); err != nil {
		return core.Usage{}, false, err
	}
	val, err := json.Marshal(u)
	if err != nil {
		return core.Usage{}, false, err
	}
	h := fnv.New32a()
	h.Write([]byte(u.JobID))
	if err := s.gate.enter(); err != nil {
		return core.Usage{}, false, err
	}
	defer s.gate.leave()
	mu := &s.usageMu[h.Sum32()%uint32(len(s.usageMu))]
	mu.Lock()
	defer mu.Unlock()
	var old core.Usage
	switch err := s.getJSON([]byte(usagePrefix+u.JobID), &old); {
	case err == nil:
		return old, false, nil
	case !errors.Is(err, core.ErrNotFound):
		return core.Usage{}, false, fmt.Errorf("reading the usage of job %s: %w", u.JobID, err)
	}
	if err := ctx.Err(); err != nil { // the check may have waited for another add of the job
		return core.Usage{}, false, err
	}
	b := s.db.NewBatch()
	defer func() { _ = b.Close() }()
	_ = b.Set([]byte(usagePrefix+u.JobID), val, nil)
	_ = b.Set(usageIndexKey(u.Owner, u.At, u.JobID), val, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return core.Usage{}, false, err
	}
	return u, true, nil
}

// ScanUsage calls fn with the owner's records completed in [from, to), oldest first. It stops
// with ctx's error once ctx is done.
func (s *Store) ScanUsage(ctx context.Context, owner string, from, to time.Time, fn func(core.Usage) bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	prefix := usageIndexPrefix + owner + "\x00"
	lower, upper := []byte(prefix), []byte(usageIndexPrefix+owner+"\x01")
	if !from.IsZero() {
		lower = []byte(prefix + cursorOf(from, ""))
	}
	if !to.IsZero() {
		upper = []byte(prefix + cursorOf(to, ""))
	}
	if err := s.gate.enter(); err != nil {
		return err
	}
	defer s.gate.leave()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	defer func() { _ = it.Close() }()
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		var u core.Usage
		if err := json.Unmarshal(it.Value(), &u); err != nil {
			return fmt.Errorf("usage record %q: %w", it.Key(), err)
		}
		if !fn(u) {
			break
		}
	}
	return it.Error()
}

var _ core.UsageStore = (*Store)(nil)
