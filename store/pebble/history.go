package pebble

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/gantryhq/gantry/core"
)

// History records live under hst/<endpoint>\x00<unix minute, 12 digits>, each the JSON of a
// core.HistoryCounts: one endpoint's minutes are adjacent and in time order.
const historyPrefix = "hst/"

func historyKey(endpoint string, at time.Time) []byte {
	return fmt.Appendf(nil, "%s%s\x00%012d", historyPrefix, endpoint, at.Unix()/60)
}

// AddHistory adds each record's counts to the stored minute, in one synced batch.
func (s *Store) AddHistory(ctx context.Context, recs []core.HistoryRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.gate.enter(); err != nil {
		return err
	}
	defer s.gate.leave()
	s.historyMu.Lock()
	defer s.historyMu.Unlock()
	b := s.db.NewBatch()
	defer func() { _ = b.Close() }()
	sums := map[string]*core.HistoryCounts{} // a key twice in recs adds up
	for _, r := range recs {
		key := historyKey(r.Endpoint, r.At)
		c := sums[string(key)]
		if c == nil {
			c = new(core.HistoryCounts)
			switch err := s.getJSON(key, c); {
			case errors.Is(err, core.ErrNotFound):
			case err != nil:
				return fmt.Errorf("reading the history of %s at %s: %w", r.Endpoint, r.At, err)
			}
			sums[string(key)] = c
		}
		c.Add(&r.Counts)
	}
	for key, c := range sums {
		val, err := json.Marshal(c)
		if err != nil {
			return err
		}
		_ = b.Set([]byte(key), val, nil)
	}
	return b.Commit(pebble.Sync)
}

// ScanHistory returns the endpoint's records of the minutes in [from, to), oldest first.
func (s *Store) ScanHistory(ctx context.Context, endpoint string, from, to time.Time) ([]core.HistoryRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.gate.enter(); err != nil {
		return nil, err
	}
	defer s.gate.leave()
	// A minute that starts before from is out; one that starts before to is in.
	lower := historyKey(endpoint, from.Add(time.Minute-time.Nanosecond))
	upper := historyKey(endpoint, to.Add(time.Minute-time.Nanosecond))
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, err
	}
	defer func() { _ = it.Close() }()
	var out []core.HistoryRecord
	prefix := len(historyPrefix) + len(endpoint) + 1
	for ok := it.First(); ok; ok = it.Next() {
		var minute int64
		if _, err := fmt.Sscanf(string(it.Key()[prefix:]), "%d", &minute); err != nil {
			return nil, fmt.Errorf("history key %q: %w", it.Key(), err)
		}
		r := core.HistoryRecord{Endpoint: endpoint, At: time.Unix(minute*60, 0).UTC()}
		if err := json.Unmarshal(it.Value(), &r.Counts); err != nil {
			return nil, fmt.Errorf("history record %q: %w", it.Key(), err)
		}
		out = append(out, r)
	}
	return out, it.Error()
}

// TrimHistory deletes the records of minutes before before, of every endpoint.
func (s *Store) TrimHistory(ctx context.Context, before time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cut := fmt.Sprintf("%012d", before.Add(time.Minute-time.Nanosecond).Unix()/60)
	b := s.db.NewBatch()
	defer func() { _ = b.Close() }()
	err := s.scanWith(historyPrefix, func(key, _ []byte) error {
		if len(key) >= 12 && string(key[len(key)-12:]) < cut {
			return b.Delete(key, nil)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("trimming history: %w", err)
	}
	if b.Empty() {
		return nil
	}
	if err := s.gate.enter(); err != nil {
		return err
	}
	defer s.gate.leave()
	return b.Commit(pebble.NoSync) // a crash keeps old minutes, which the next trim removes
}

var _ core.HistoryStore = (*Store)(nil)
