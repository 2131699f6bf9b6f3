package pebble

// SetRevocationSweepFloor lowers the revocation count at which RevokeWorker sweeps expired
// revocations, so a test needs few synced writes to reach it.
func (s *Store) SetRevocationSweepFloor(n int) {
	s.rev.writeMu.Lock()
	defer s.rev.writeMu.Unlock()
	s.rev.minSweep, s.rev.nextSweep = n, n
}

// Revocations returns how many revocations the store holds in memory.
func (s *Store) Revocations() int {
	s.rev.mu.RLock()
	defer s.rev.mu.RUnlock()
	return len(s.rev.until)
}

// InputFiles returns how many job inputs the store keeps in files.
func (s *Store) InputFiles() int { return s.files.count() }
