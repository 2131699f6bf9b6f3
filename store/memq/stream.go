package memq

import (
	"context"

	"github.com/gantryhq/gantry/core"
)

// AppendChunks adds stream chunks to a job the worker runs; see core.JobStore.
func (s *Store) AppendChunks(ctx context.Context, id, worker string, chunks []core.StreamChunk) (int, error) {
	key, ok := core.ParseJobKey(id)
	if !ok {
		return 0, core.ErrNotFound
	}
	sh, e, ok := s.lock(key)
	if !ok {
		sh.mu.Unlock()
		return 0, core.ErrNotFound
	}
	if e.state() != stRunning || e.x == nil || e.x.rec == nil || e.x.rec.WorkerID != worker {
		sh.mu.Unlock()
		return 0, &core.StateError{ID: id, Status: e.state().status()}
	}
	x := e.x
	x.rec.Streamed = true
	for _, c := range chunks {
		c.Seq = s.chunkSeq.Add(1)
		x.chunks = append(x.chunks, c)
		x.chunkBytes += len(c.Output) + len(c.Metrics)
	}
	if x.changed != nil {
		close(x.changed)
		x.changed = nil
	}
	n := x.chunkBytes
	sh.put(key, e)
	return n, nil
}

// DrainChunks hands out the job's unread chunks once; see core.JobStore.
func (s *Store) DrainChunks(ctx context.Context, id string) ([]core.StreamChunk, error) {
	key, ok := core.ParseJobKey(id)
	if !ok {
		return nil, core.ErrNotFound
	}
	sh, e, ok := s.lock(key)
	if !ok {
		sh.mu.Unlock()
		return nil, core.ErrNotFound
	}
	var out []core.StreamChunk
	if x := e.x; x != nil && len(x.chunks) > 0 {
		out = x.chunks
		x.kept = append(x.kept, out...)
		x.keptBytes += x.chunkBytes
		x.chunks, x.chunkBytes = nil, 0
		drop := 0
		for (x.keptBytes > core.MaxStreamKept || len(x.kept)-drop > core.MaxStreamKeptParts) && drop < len(x.kept)-1 {
			x.keptBytes -= len(x.kept[drop].Output) + len(x.kept[drop].Metrics)
			drop++
		}
		if drop > 0 {
			x.kept = append([]core.StreamChunk(nil), x.kept[drop:]...)
		}
	}
	sh.put(key, e)
	return out, nil
}

// PeekChunks returns the job's chunks after a Seq, kept and unread; see core.JobStore.
func (s *Store) PeekChunks(ctx context.Context, id string, after int64) ([]core.StreamChunk, error) {
	key, ok := core.ParseJobKey(id)
	if !ok {
		return nil, core.ErrNotFound
	}
	sh, e, ok := s.lock(key)
	if !ok {
		sh.mu.Unlock()
		return nil, core.ErrNotFound
	}
	var out []core.StreamChunk
	if x := e.x; x != nil {
		for _, list := range [][]core.StreamChunk{x.kept, x.chunks} {
			for _, c := range list {
				if c.Seq > after {
					out = append(out, c)
				}
			}
		}
	}
	sh.mu.Unlock()
	return out, nil
}

// WaitEnded waits for the job's end; see core.JobStore.
func (s *Store) WaitEnded(ctx context.Context, id string) error {
	return s.wait(ctx, id, false)
}

// WaitChunks waits for the job's end or an unread chunk; see core.JobStore.
func (s *Store) WaitChunks(ctx context.Context, id string) error {
	return s.wait(ctx, id, true)
}

func (s *Store) wait(ctx context.Context, id string, chunks bool) error {
	key, ok := core.ParseJobKey(id)
	if !ok {
		return nil
	}
	sh, e, ok := s.lock(key)
	if !ok || e.state().terminal() || (chunks && e.x != nil && len(e.x.chunks) > 0) {
		sh.mu.Unlock()
		return nil
	}
	x := e.extra()
	var ch chan struct{}
	if chunks {
		if x.changed == nil {
			x.changed = make(chan struct{})
		}
		ch = x.changed
	} else {
		if x.ended == nil {
			x.ended = make(chan struct{})
		}
		ch = x.ended
	}
	sh.put(key, e)
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
