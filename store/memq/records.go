package memq

import (
	"maps"
	"sync"

	"github.com/gantryhq/gantry/core"
)

// Records is a core.JobRecords held in memory, for tests: Open(NewRecords(), …) is a job
// store that passes the same suite as Pebble's, with nothing on disk (durable writes are only
// as durable as the process).
type Records struct {
	mu     sync.Mutex
	jobs   map[string]core.Job
	inputs map[string][]byte
}

// NewRecords returns empty records.
func NewRecords() *Records {
	return &Records{jobs: map[string]core.Job{}, inputs: map[string][]byte{}}
}

// PutJob stores a copy of the record, and the input when given.
func (r *Records) PutJob(j *core.Job, input []byte, durable bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.jobs[j.ID] = *j
	if input != nil {
		r.inputs[j.ID] = input
	}
	return nil
}

// SyncJobs does nothing: memory is as durable as it gets.
func (r *Records) SyncJobs() error { return nil }

// GetJob returns a copy of a record.
func (r *Records) GetJob(id string) (*core.Job, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.jobs[id]
	if !ok {
		return nil, core.ErrNotFound
	}
	return &j, nil
}

// Input returns a job's input.
func (r *Records) Input(id string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in, ok := r.inputs[id]
	if !ok {
		return nil, core.ErrNotFound
	}
	return in, nil
}

// DeleteJob removes a record and its input.
func (r *Records) DeleteJob(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.jobs, id)
	delete(r.inputs, id)
	return nil
}

// ScanJobs calls fn with a copy of every record.
func (r *Records) ScanJobs(fn func(*core.Job)) error {
	r.mu.Lock()
	jobs := maps.Clone(r.jobs)
	r.mu.Unlock()
	for _, j := range jobs {
		fn(&j)
	}
	return nil
}

var _ core.JobRecords = (*Records)(nil)
