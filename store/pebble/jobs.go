package pebble

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/memq"
)

// Jobs live under job/<id> (the record) and jin/<id> (the input, written once, or a reference
// to its file when it is InputFileBytes or more: see inputs.go), so that records stay small and
// queued inputs wait on disk, not in memory.
const (
	jobPrefix   = "job/"
	inputPrefix = "jin/"
)

// PutJob writes a job record, and its input when given. With durable the write is synced
// before PutJob returns; Pebble groups the syncs of concurrent writers into one.
func (s *Store) PutJob(j *core.Job, input []byte, durable bool) error {
	if err := s.gate.enter(); err != nil {
		return err
	}
	defer s.gate.leave()
	val := encodeJob(j)
	opts := pebble.NoSync
	if durable {
		opts = pebble.Sync
	}
	if input == nil {
		return s.db.Set([]byte(jobPrefix+j.ID), val, opts)
	}
	if len(input) >= s.files.min {
		// Synced before the reference to it is stored: a reference never names a file a
		// crash could lose.
		if err := s.files.write(j.ID, input); err != nil {
			return err
		}
		input = inputFileRef(len(input))
	}
	// Sized exactly: a batch's buffer otherwise takes the next power of two past the input, up
	// to twice its size. (NewBatchWithSize would not do: the first Set rounds it up again.)
	size := batchSize(len(inputPrefix)+len(j.ID), len(input)) + batchSize(len(jobPrefix)+len(j.ID), len(val))
	b := s.db.NewBatch(pebble.WithInitialSizeBytes(size))
	defer func() { _ = b.Close() }()
	_ = b.Set([]byte(inputPrefix+j.ID), input, nil)
	_ = b.Set([]byte(jobPrefix+j.ID), val, nil)
	return b.Commit(opts)
}

// batchSize bounds what one Set of a key and value of these lengths takes in a batch: the
// batch header, the record's kind, two varint lengths and the bytes.
func batchSize(key, value int) int { return 12 + 1 + 2*binary.MaxVarintLen64 + key + value }

// SyncJobs returns once every write made before it is on disk. Concurrent callers share one
// WAL sync (Pebble's group commit).
func (s *Store) SyncJobs() error {
	if err := s.gate.enter(); err != nil {
		return err
	}
	defer s.gate.leave()
	return s.db.LogData(nil, pebble.Sync)
}

// GetJob reads a job record.
func (s *Store) GetJob(id string) (*core.Job, error) {
	var j core.Job
	if err := s.getWith([]byte(jobPrefix+id), func(b []byte) error { return decodeJob(b, &j) }); err != nil {
		return nil, err
	}
	return &j, nil
}

// Input reads a job's input, from its file when it has one.
func (s *Store) Input(id string) ([]byte, error) {
	var in []byte
	fileLen := int64(-1)
	err := s.getWith([]byte(inputPrefix+id), func(b []byte) error {
		if n, ok := parseInputFileRef(b); ok {
			fileLen = n
		} else {
			in = append([]byte(nil), b...)
		}
		return nil
	})
	if err != nil || fileLen < 0 {
		return in, err
	}
	return s.files.read(id, fileLen)
}

// DeleteJob removes a job and its input. Not synced: a delete lost in a crash is redone when
// the expired job is found again at startup.
func (s *Store) DeleteJob(id string) error {
	if err := s.gate.enter(); err != nil {
		return err
	}
	defer s.gate.leave()
	b := s.db.NewBatch()
	defer func() { _ = b.Close() }()
	_ = b.Delete([]byte(jobPrefix+id), nil)
	_ = b.Delete([]byte(inputPrefix+id), nil)
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	// After the records: a crash between the two leaves a file without a job, which Open
	// removes, never a job whose input file is gone (but for an expired job, whose input no
	// one reads, and which Open deletes again).
	return s.files.remove(id)
}

// ScanJobs calls fn for every stored job record.
func (s *Store) ScanJobs(fn func(*core.Job)) error {
	return s.scanWith(jobPrefix, func(key, val []byte) error {
		var j core.Job
		if err := decodeJob(val, &j); err != nil {
			return fmt.Errorf("job %s: %w", key[len(jobPrefix):], err)
		}
		fn(&j)
		return nil
	})
}

var _ core.JobRecords = (*Store)(nil)

// Jobs opens the job store over this store's records: store/memq's index, queues and wake-ups
// in memory, each record and input in Pebble.
func (s *Store) Jobs(o memq.Options) (*memq.Store, error) { return memq.Open(s, o) }
