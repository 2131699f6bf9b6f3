package memory

import (
	"context"
	"errors"
	"time"
)

// Secret implements core.SecretStore.
func (s *Store) Secret(ctx context.Context, name string, fresh []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if name == "" || len(fresh) == 0 {
		return nil, errors.New("a secret needs a name and a value")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.secrets[name]
	if !ok {
		v = append([]byte(nil), fresh...)
		s.secrets[name] = v
	}
	return append([]byte(nil), v...), nil
}

// RevokeWorker implements core.WorkerRevocations. It forgets a revocation only when the store
// goes.
func (s *Store) RevokeWorker(ctx context.Context, worker string, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if worker == "" {
		return errors.New("revoking the tokens of a worker without an id")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.revoked[worker]; !ok || until.After(old) {
		s.revoked[worker] = until
	}
	return nil
}

// WorkerRevoked implements core.WorkerRevocations.
func (s *Store) WorkerRevoked(ctx context.Context, worker string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.revoked[worker]
	return ok, nil
}
