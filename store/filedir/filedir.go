// Package filedir keeps the files model jobs produce in a directory, one file per name, and the
// HMAC key that signs their URLs (core.FileStore).
package filedir

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gantryhq/gantry/core"
)

// Dir is a directory of produced files.
type Dir struct {
	path string
}

// Open returns the directory at path, creating it (mode 0700) if needed.
func Open(path string) (*Dir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("creating the file directory: %w", err)
	}
	return &Dir{path: path}, nil
}

// checkName refuses names that could leave the directory or hide as temporary files.
func checkName(name string) error {
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return fmt.Errorf("file name %q is not allowed", name)
	}
	return nil
}

// CreateFile writes a new file through a temporary one, synced, then linked into place (an
// existing name is an error, never overwritten). Its modification time is set to created. A
// ctx that ends before the file is linked leaves nothing behind.
func (d *Dir) CreateFile(ctx context.Context, name string, r io.Reader, max int64, created time.Time) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := checkName(name); err != nil {
		return 0, err
	}
	tmp, err := os.CreateTemp(d.path, ".tmp-*")
	if err != nil {
		return 0, err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	n, err := io.Copy(tmp, io.LimitReader(core.ContextReader(ctx, r), max+1))
	if err == nil && n > max {
		err = core.Errorf(core.KindTooLarge, "the file is larger than the limit of %d MB", max>>20)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		err = os.Chtimes(tmp.Name(), created, created)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return 0, err
	}
	if err := os.Link(tmp.Name(), filepath.Join(d.path, name)); err != nil {
		return 0, err
	}
	return n, nil
}

// OpenFile opens a file; core.ErrNotFound when there is none.
func (d *Dir) OpenFile(ctx context.Context, name string) (io.ReadSeekCloser, core.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, core.FileInfo{}, err
	}
	if err := checkName(name); err != nil {
		return nil, core.FileInfo{}, core.ErrNotFound
	}
	f, err := os.Open(filepath.Join(d.path, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, core.FileInfo{}, core.ErrNotFound
	}
	if err != nil {
		return nil, core.FileInfo{}, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, core.FileInfo{}, err
	}
	return f, core.FileInfo{Size: st.Size(), Created: st.ModTime()}, nil
}

// RemoveBefore removes the files (and stray temporary files) created before t. It stops with
// ctx's error once ctx is done, having removed some.
func (d *Dir) RemoveBefore(ctx context.Context, t time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() || !info.ModTime().Before(t) {
			continue
		}
		if err := os.Remove(filepath.Join(d.path, e.Name())); err == nil && !strings.HasPrefix(e.Name(), ".") {
			n++
		}
	}
	return n, nil
}

// KeySize is the length of the URL-signing key in bytes.
const KeySize = 32

// LoadKey reads the URL-signing key at path, creating it (random, mode 0600) on first use, so
// that signed URLs survive restarts.
func LoadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil && len(b) >= KeySize:
		return b, nil
	case err == nil:
		return nil, fmt.Errorf("the signing key %s is %d bytes; want %d (remove it to make a new one)", path, len(b), KeySize)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	key := make([]byte, KeySize)
	_, _ = rand.Read(key)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return LoadKey(path) // another process made it first
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(key); err != nil {
		_ = f.Close()
		return nil, err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return key, f.Close()
}

var _ core.FileStore = (*Dir)(nil)
