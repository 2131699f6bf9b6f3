package postgres

// Parked returns how many takers wait on the endpoint in this store, having found nothing
// queued.
func (s *Jobs) Parked(endpoint string) int {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.hub.asleep[endpoint]
}

// The take statements, without and with the heartbeat.
const (
	TakeSQL     = takeSQL
	TakeBeatSQL = takeBeatSQL
)
