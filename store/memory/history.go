package memory

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/gantryhq/gantry/core"
)

type historyKey struct {
	endpoint string
	minute   int64 // unix minute
}

// AddHistory adds each record's counts to the stored minute.
func (s *Store) AddHistory(ctx context.Context, recs []core.HistoryRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		k := historyKey{r.Endpoint, r.At.Unix() / 60}
		c := s.history[k]
		c.Add(&r.Counts)
		s.history[k] = c
	}
	return nil
}

// ScanHistory returns the endpoint's records of the minutes in [from, to), oldest first.
func (s *Store) ScanHistory(ctx context.Context, endpoint string, from, to time.Time) ([]core.HistoryRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []core.HistoryRecord
	for k, c := range s.history {
		at := time.Unix(k.minute*60, 0).UTC()
		if k.endpoint == endpoint && !at.Before(from) && at.Before(to) {
			out = append(out, core.HistoryRecord{Endpoint: endpoint, At: at, Counts: c})
		}
	}
	slices.SortFunc(out, func(a, b core.HistoryRecord) int { return cmp.Compare(a.At.Unix(), b.At.Unix()) })
	return out, nil
}

// TrimHistory deletes the records of minutes before before.
func (s *Store) TrimHistory(ctx context.Context, before time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.history {
		if time.Unix(k.minute*60, 0).Before(before) {
			delete(s.history, k)
		}
	}
	return nil
}

var _ core.HistoryStore = (*Store)(nil)
