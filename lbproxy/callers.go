package lbproxy

import (
	"context"
	"sync"
	"sync/atomic"
)

// callerSet tracks the running loops, so that a shutdown can end them.
type callerSet struct {
	stopping atomic.Bool
	mu       sync.Mutex
	conns    map[*callerConn]struct{}
	empty    chan struct{} // closed when stopping and no loop is left
}

// add registers c; it returns false when the server is shutting down.
func (s *callerSet) add(c *callerConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[*callerConn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return !s.stopping.Load()
}

func (s *callerSet) remove(c *callerConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if len(s.conns) == 0 && s.empty != nil {
		close(s.empty)
		s.empty = nil
	}
}

func (s *callerSet) closing() bool { return s.stopping.Load() }

// shutdown ends the loops: an idle one at once, a busy one after its answer (which tells the
// caller Connection: close). It returns when none is left or ctx ends.
func (s *callerSet) shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.stopping.Store(true)
	for c := range s.conns {
		_ = c.conn.SetReadDeadline(aLongTimeAgo)
	}
	if len(s.conns) == 0 {
		s.mu.Unlock()
		return nil
	}
	if s.empty == nil {
		s.empty = make(chan struct{})
	}
	empty := s.empty
	s.mu.Unlock()
	select {
	case <-empty:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
