package pebble

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// InputFileBytes is the size from which a job's input is kept in a file of its own
// (<store>/inputs/<job id>), written and synced once and removed with the job, instead of in
// Pebble. Pebble copies a value into its write batch, its memtable and its log, and a batch
// over half a memtable (16 MB) becomes a memtable of its own that a flush writes out again:
// twelve 20 MB runsync inputs stored together took the server's memory to 3x the bodies. A
// file is written from the request's own buffer, with no copy. 1 MiB, as Badger's default
// value threshold: below it, an input costs a file's create, sync and directory sync more than
// its bytes.
const InputFileBytes = 1 << 20

const (
	inputDir    = "inputs"
	inputSuffix = ".input"
	tmpSuffix   = ".tmp"
)

// inputFileRef is what jin/<id> holds for an input kept in a file: a zero byte (no JSON text
// starts with one) and the file's length, big-endian. An input stored in Pebble is never
// exactly this long and starting with a zero byte: inputs are JSON.
const inputFileRefLen = 9

func inputFileRef(n int) []byte {
	ref := make([]byte, inputFileRefLen)
	binary.BigEndian.PutUint64(ref[1:], uint64(n))
	return ref
}

// parseInputFileRef returns the file length a jin/ value refers to, or false when the value is
// the input itself.
func parseInputFileRef(v []byte) (int64, bool) {
	if len(v) != inputFileRefLen || v[0] != 0 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v[1:])), true
}

// inputFiles are the jobs whose inputs are kept in files.
type inputFiles struct {
	dir string
	min int // InputFileBytes

	mu  sync.Mutex
	ids map[string]struct{} // jobs with a file, so that deleting any other needs no file call
}

// validFileID reports whether a job id can name a file: core.JobKey's are hex digits, dashes
// and "sync-".
func validFileID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func (f *inputFiles) path(id string) string { return filepath.Join(f.dir, id+inputSuffix) }

// openInputFiles opens the input directory of the store in dir, creating it, and tidies it
// against db: a file whose job has no reference to it (the process ended between writing the
// file and storing the job, or between deleting the job and removing the file) is removed, as
// is a temporary file a write left.
func openInputFiles(dir string, db *pebble.DB) (*inputFiles, error) {
	f := &inputFiles{dir: filepath.Join(dir, inputDir), min: InputFileBytes, ids: map[string]struct{}{}}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the input directory: %w", err)
	}
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		return nil, fmt.Errorf("reading the input directory: %w", err)
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), inputSuffix)
		if ok && validFileID(id) {
			v, closer, err := db.Get([]byte(inputPrefix + id))
			switch {
			case err == nil:
				_, ok = parseInputFileRef(v)
				_ = closer.Close()
			case errors.Is(err, pebble.ErrNotFound):
				ok = false
			default:
				return nil, fmt.Errorf("reading job %s's input: %w", id, err)
			}
		}
		if ok {
			f.ids[id] = struct{}{}
			continue
		}
		if err := os.Remove(filepath.Join(f.dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("removing a stray input file: %w", err)
		}
	}
	return f, nil
}

// write stores input in the job's file, synced with its directory entry, so that a reference
// to it may be stored next. The file is written whole under a temporary name and renamed, so
// a file under its own name is always complete.
func (f *inputFiles) write(id string, input []byte) error {
	if !validFileID(id) {
		return fmt.Errorf("job id %q cannot name an input file", id)
	}
	tmp := filepath.Join(f.dir, id+tmpSuffix)
	if err := writeSynced(tmp, input); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing job %s's input file: %w", id, err)
	}
	if err := os.Rename(tmp, f.path(id)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing job %s's input file: %w", id, err)
	}
	if err := syncDir(f.dir); err != nil {
		return fmt.Errorf("writing job %s's input file: %w", id, err)
	}
	f.mu.Lock()
	f.ids[id] = struct{}{}
	f.mu.Unlock()
	return nil
}

func writeSynced(name string, b []byte) error {
	file, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = file.Write(b)
	if err == nil {
		err = file.Sync()
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// read returns the job's input from its file, which must hold n bytes.
func (f *inputFiles) read(id string, n int64) ([]byte, error) {
	file, err := os.Open(f.path(id))
	if err != nil {
		return nil, fmt.Errorf("reading job %s's input file: %w", id, err)
	}
	defer func() { _ = file.Close() }()
	b := make([]byte, n)
	if _, err := io.ReadFull(file, b); err != nil {
		return nil, fmt.Errorf("reading job %s's input file %s (%d bytes): %w", id, f.path(id), n, err)
	}
	return b, nil
}

// remove deletes the job's file, if it has one.
func (f *inputFiles) remove(id string) error {
	f.mu.Lock()
	_, ok := f.ids[id]
	delete(f.ids, id)
	f.mu.Unlock()
	if !ok {
		return nil
	}
	if err := os.Remove(f.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing job %s's input file: %w", id, err)
	}
	return nil
}

// count returns how many inputs are kept in files.
func (f *inputFiles) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ids)
}
