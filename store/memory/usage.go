package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gantryhq/gantry/core"
)

// AddUsage stores u unless the job already has a record.
func (s *Store) AddUsage(ctx context.Context, u core.Usage) (core.Usage, bool, error) {
	if err := ctx.Err(); err != nil {
		return core.Usage{}, false, err
	}
	val, err := json.Marshal(u)
	if err != nil {
		return core.Usage{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.usage[u.JobID]; ok {
		var kept core.Usage
		return kept, false, json.Unmarshal(old, &kept)
	}
	s.usage[u.JobID] = val
	return u, true, nil
}

// ScanUsage calls fn with the owner's records completed in [from, to), oldest first. fn runs
// outside the store's lock, so it may call the store.
func (s *Store) ScanUsage(ctx context.Context, owner string, from, to time.Time, fn func(core.Usage) bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var recs []core.Usage
	s.mu.Lock()
	for _, b := range s.usage {
		var u core.Usage
		if err := json.Unmarshal(b, &u); err != nil {
			s.mu.Unlock()
			return fmt.Errorf("usage record: %w", err)
		}
		if u.Owner == owner && (from.IsZero() || !u.At.Before(from)) && (to.IsZero() || u.At.Before(to)) {
			recs = append(recs, u)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(recs, func(a, b core.Usage) int { return cmp.Or(a.At.Compare(b.At), strings.Compare(a.JobID, b.JobID)) })
	for _, u := range recs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !fn(u) {
			break
		}
	}
	return nil
}

var _ core.UsageStore = (*Store)(nil)
