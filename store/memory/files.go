package memory

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/gantryhq/gantry/core"
)

// file is a produced file's contents and creation time.
type file struct {
	data    []byte
	created time.Time
}

// CreateFile reads a new file from r, at most max bytes, and stores it; an existing name is an
// error (fs.ErrExist), never overwritten.
func (s *Store) CreateFile(ctx context.Context, name string, r io.Reader, max int64, created time.Time) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(core.ContextReader(ctx, r), max+1))
	switch {
	case err != nil:
		return 0, err
	case n > max:
		return 0, core.Errorf(core.KindTooLarge, "the file is larger than the limit of %d MB", max>>20)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.files[name]; ok {
		return 0, fmt.Errorf("file %q: %w", name, fs.ErrExist)
	}
	s.files[name] = file{data: buf.Bytes(), created: created}
	return n, nil
}

// OpenFile opens a file for reading; core.ErrNotFound when there is none.
func (s *Store) OpenFile(ctx context.Context, name string) (io.ReadSeekCloser, core.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, core.FileInfo{}, err
	}
	s.mu.Lock()
	f, ok := s.files[name]
	s.mu.Unlock()
	if !ok {
		return nil, core.FileInfo{}, core.ErrNotFound
	}
	// A file's bytes are never written after CreateFile, so readers share them.
	return nopCloser{bytes.NewReader(f.data)}, core.FileInfo{Size: int64(len(f.data)), Created: f.created}, nil
}

// RemoveBefore removes the files created before t.
func (s *Store) RemoveBefore(ctx context.Context, t time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for name, f := range s.files {
		if f.created.Before(t) {
			delete(s.files, name)
			n++
		}
	}
	return n, nil
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

var _ core.FileStore = (*Store)(nil)
