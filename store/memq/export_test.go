package memq

// Exported for tests.
const (
	MaxSeq = maxSeq
	MaxEp  = maxEp
)

// EntryFields packs an entry, sets its state to next when non-zero, and reads it back.
func EntryFields(seq uint64, ep uint32, st uint8, low bool, next uint8) (uint64, uint32, uint8, bool) {
	e := newEntry(seq, 0, ep, state(st), low)
	if next != 0 {
		e.setState(state(next))
	}
	return e.seq(), e.ep(), uint8(e.state()), e.low()
}

// ListVisits returns how many index entries (jobs) List has looked at so far.
func (s *Store) ListVisits() int64 { return s.listVisits.Load() }
