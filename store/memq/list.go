package memq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/gantryhq/gantry/core"
)

// List returns jobs newest first; see core.JobStore. It walks the whole index, which is fine
// for an operator's listing but not for a hot path: the cursor is the last Seq handed out.
func (s *Store) List(ctx context.Context, f core.JobFilter) ([]core.Job, string, error) {
	var below uint64 // 0 = from the newest
	if f.Cursor != "" {
		n, err := strconv.ParseUint(f.Cursor, 10, 64)
		if err != nil || n == 0 {
			return nil, "", fmt.Errorf("memq: cursor %q: %w", f.Cursor, core.ErrBadCursor)
		}
		below = n
	}
	epID, all := uint32(0), f.Endpoint == ""
	if !all {
		ep := s.known(f.Endpoint)
		if ep == nil {
			return nil, "", nil
		}
		epID = ep.id
	}
	type hit struct {
		seq uint64
		key core.JobKey
	}
	var hits []hit
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.jobs { // slots: the extras are not needed to filter
			if (all || e.ep() == epID) && (f.Status == 0 || f.Status.Has(e.state().status())) && (below == 0 || e.seq() < below) {
				hits = append(hits, hit{e.seq(), k})
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(hits, func(a, b hit) int { return cmp.Compare(b.seq, a.seq) })
	var out []core.Job
	for i, h := range hits {
		if f.Limit > 0 && len(out) == f.Limit {
			return out, strconv.FormatUint(hits[i-1].seq, 10), nil
		}
		rec, err := s.Get(ctx, h.key.String())
		switch {
		case errors.Is(err, core.ErrNotFound):
			continue // removed meanwhile
		case err != nil:
			return nil, "", err
		case f.Owner != "" && rec.Owner != f.Owner, f.WebhookPending && !rec.WebhookPending:
			continue
		case f.Status != 0 && !f.Status.Has(rec.Status):
			continue // changed meanwhile
		}
		out = append(out, rec)
	}
	return out, "", nil
}

// Purge applies change to the endpoint's queued jobs; see core.JobStore.
func (s *Store) Purge(ctx context.Context, endpoint, owner string, change func(*core.Job), durable bool) (int, error) {
	ep := s.known(endpoint)
	if ep == nil {
		return 0, nil
	}
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, sl := range sh.jobs {
			if sl.ep() != ep.id || sl.state() != stQueued {
				continue
			}
			e := sh.entry(k, sl)
			if owner != "" && e.x != nil && e.x.hot > 0 && e.x.rec.Owner != owner {
				continue // told by the hot copy, without a read
			}
			_, _, err := s.update(k, &e, core.Statuses(core.InQueue), func(j *core.Job) error {
				if owner != "" && j.Owner != owner {
					return errSkip
				}
				change(j)
				if j.Status == core.InQueue {
					return fmt.Errorf("memq: purging job %s left it %s", j.ID, j.Status)
				}
				return nil
			})
			switch {
			case errors.Is(err, errSkip):
				continue
			case err != nil:
				sh.mu.Unlock()
				return n, err
			}
			sh.store(k, &e)
			n++
		}
		sh.mu.Unlock()
	}
	if durable && n > 0 {
		return n, s.rec.SyncJobs()
	}
	return n, nil
}

// errSkip leaves a job a purge does not apply to unchanged.
var errSkip = errors.New("memq: not this owner's job")
