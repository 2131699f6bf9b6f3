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

// List returns jobs newest first; see core.JobStore. The cursor is the last Seq handed out.
//
// An endpoint's list reads the endpoint's own index (of the filter's owner, on a shared
// endpoint; of its live or ended jobs, when the status filter wants only those): a page looks
// at the jobs it returns, one more to know whether another page follows, and the jobs of
// that index a status filter passes over (queued ones for IN_PROGRESS, say); never at other
// endpoints' or other owners' jobs. The index's lock is held for one batch of entries at a
// time, and each job's shard lock for that job alone. A list of every endpoint (Endpoint "",
// the engine's restart and webhook sweeps) walks every job.
func (s *Store) List(ctx context.Context, f core.JobFilter) ([]core.Job, string, error) {
	var below uint64 // 0 = from the newest
	if f.Cursor != "" {
		n, err := strconv.ParseUint(f.Cursor, 10, 64)
		if err != nil || n == 0 {
			return nil, "", fmt.Errorf("memq: cursor %q: %w", f.Cursor, core.ErrBadCursor)
		}
		below = n
	}
	if f.Endpoint == "" {
		return s.listAll(ctx, f, below)
	}
	ep := s.known(f.Endpoint)
	if ep == nil {
		return nil, "", nil
	}
	// A status filter of live jobs only, or of ended ones only, reads only that list.
	live := f.Status == 0 || f.Status.Has(core.InQueue) || f.Status.Has(core.InProgress)
	ended := f.Status == 0 || f.Status.Has(core.Completed) || f.Status.Has(core.Failed) ||
		f.Status.Has(core.Cancelled) || f.Status.Has(core.TimedOut)
	var out []core.Job
	if f.Limit > 0 {
		out = make([]core.Job, 0, min(f.Limit, listBatch))
	}
	var batch []ixEntry
	for {
		// A batch is what the page still needs, and one more; at most listBatch, so that
		// the index's lock (which inserts take) is held briefly.
		n := listBatch
		if f.Limit > 0 {
			n = min(f.Limit-len(out)+1, listBatch)
		}
		batch = ep.lists.page(f.Owner, live, ended, below, n, batch[:0])
		if len(batch) == 0 {
			return out, "", nil
		}
		for _, x := range batch {
			below = x.seq()
			full := f.Limit > 0 && len(out) == f.Limit
			rec, ok, err := s.listed(x.key(), x.seq(), ep.id, f, !full)
			switch {
			case err != nil:
				return nil, "", err
			case !ok:
				continue
			case full: // another job follows the page
				return out, strconv.FormatUint(out[len(out)-1].Seq, 10), nil
			}
			out = append(out, rec)
		}
	}
}

// listBatch bounds the index entries List reads under the index's lock at a time.
const listBatch = 256

// listed reads a job an endpoint's index holds, if it is still there and matches the filter:
// ok is false for one removed or changed meanwhile. With read false only the index entry is
// looked at (the filter's status; the owner is the index's), unless the filter needs the
// record.
func (s *Store) listed(k core.JobKey, seq uint64, ep uint32, f core.JobFilter, read bool) (core.Job, bool, error) {
	s.listVisits.Add(1)
	sh, e, found := s.lock(k)
	defer sh.mu.Unlock()
	if !found || e.seq() != seq || e.ep() != ep || (f.Status != 0 && !f.Status.Has(e.state().status())) {
		return core.Job{}, false, nil
	}
	if !read && !f.WebhookPending { // the owner is the index's
		return core.Job{}, true, nil
	}
	rec, err := s.record(k, &e)
	switch {
	case errors.Is(err, core.ErrNotFound):
		return core.Job{}, false, nil // removed meanwhile
	case err != nil:
		return core.Job{}, false, err
	case f.Owner != "" && rec.Owner != f.Owner, f.WebhookPending && !rec.WebhookPending:
		return core.Job{}, false, nil
	}
	return *rec, true, nil
}

// listAll lists the jobs of every endpoint: it walks the whole index (the engine's sweeps at
// a restart and for webhooks, which want every match, with no limit).
func (s *Store) listAll(ctx context.Context, f core.JobFilter, below uint64) ([]core.Job, string, error) {
	type hit struct {
		seq uint64
		key core.JobKey
	}
	var hits []hit
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.jobs { // slots: the extras are not needed to filter
			if (f.Status == 0 || f.Status.Has(e.state().status())) && (below == 0 || e.seq() < below) {
				hits = append(hits, hit{e.seq(), k})
			}
		}
		s.listVisits.Add(int64(len(sh.jobs)))
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

// Purge applies change to the endpoint's queued jobs; see core.JobStore. It reads the live
// jobs of the endpoint's list index (owner's, when given), not every job of the store, and
// locks one job's shard at a time.
func (s *Store) Purge(ctx context.Context, endpoint, owner string, change func(*core.Job), durable bool) (int, error) {
	ep := s.known(endpoint)
	if ep == nil {
		return 0, nil
	}
	n := 0
	var batch []ixEntry
	for below := uint64(0); ; {
		batch = ep.lists.page(owner, true, false, below, listBatch, batch[:0])
		if len(batch) == 0 {
			break
		}
		for _, x := range batch {
			below = x.seq()
			ok, err := s.purge(x.key(), x.seq(), ep.id, owner, change)
			if err != nil {
				return n, err
			}
			if ok {
				n++
			}
		}
	}
	if durable && n > 0 {
		return n, s.rec.SyncJobs()
	}
	return n, nil
}

// purge applies Purge's change to one job, if it is still the endpoint's and queued.
func (s *Store) purge(k core.JobKey, seq uint64, ep uint32, owner string, change func(*core.Job)) (bool, error) {
	s.listVisits.Add(1)
	sh, e, found := s.lock(k)
	defer sh.mu.Unlock()
	if !found || e.seq() != seq || e.ep() != ep || e.state() != stQueued {
		return false, nil
	}
	if owner != "" && e.x != nil && e.x.hot > 0 && e.x.rec.Owner != owner {
		return false, nil // told by the hot copy, without a read
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
		return false, nil
	case err != nil:
		return false, err
	}
	sh.store(k, &e)
	return true, nil
}

// errSkip leaves a job a purge does not apply to unchanged.
var errSkip = errors.New("memq: not this owner's job")
