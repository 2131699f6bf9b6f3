package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gantryhq/gantry/core"
)

// Produced files live in PostgreSQL, so that every replica serves every file without a shared
// file system (see DESIGN.md, "Scale-out"): a row per file and its bytes in chunks, so that
// neither a write nor a read holds a whole file (up to core.MaxFileBytes) in memory. Files
// live an hour (core.DefaultFileTTL); RemoveBefore drops them with their chunks.

// fileChunk is the size of a stored chunk: the most a write reads ahead of its context's end,
// and what a read fetches at a time.
const fileChunk = 256 << 10

// CreateFile writes a new file from r, at most max bytes, in one transaction: a refused or
// failed write leaves nothing, and an existing name is an error (fs.ErrExist).
func (db *DB) CreateFile(ctx context.Context, name string, r io.Reader, max int64, created time.Time) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var size int64
	err := pgx.BeginFunc(ctx, db.q(ctx), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO gantry_files (name, size, created_at) VALUES ($1, 0, $2)`, name, created); err != nil {
			if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "23505" { // unique_violation
				return fmt.Errorf("file %q: %w", name, fs.ErrExist)
			}
			return err
		}
		buf := make([]byte, fileChunk)
		for seq := 0; ; seq++ {
			n, err := io.ReadFull(core.ContextReader(ctx, r), buf)
			size += int64(n)
			if size > max {
				return core.Errorf(core.KindTooLarge, "the file is larger than the limit of %d MB", max>>20)
			}
			if n > 0 {
				if _, err := tx.Exec(ctx, `INSERT INTO gantry_file_chunks (name, seq, data) VALUES ($1, $2, $3)`, name, seq, buf[:n]); err != nil {
					return err
				}
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				break
			}
			if err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `UPDATE gantry_files SET size = $2 WHERE name = $1`, name, size)
		return err
	})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			err = fmt.Errorf("%w (%v)", ctxErr, err)
		}
		return 0, fmt.Errorf("storing file %s: %w", name, err)
	}
	return size, nil
}

// OpenFile opens a file for reading; core.ErrNotFound when there is none. The reader fetches a
// chunk at a time with ctx.
func (db *DB) OpenFile(ctx context.Context, name string) (io.ReadSeekCloser, core.FileInfo, error) {
	var info core.FileInfo
	err := db.q(ctx).QueryRow(ctx, `SELECT size, created_at FROM gantry_files WHERE name = $1`, name).Scan(&info.Size, &info.Created)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, info, core.ErrNotFound
	}
	if err != nil {
		return nil, info, fmt.Errorf("opening file %s: %w", name, err)
	}
	return &fileReader{ctx: ctx, db: db, name: name, size: info.Size, seq: -1}, info, nil
}

// RemoveBefore removes the files created before t, with their chunks.
func (db *DB) RemoveBefore(ctx context.Context, t time.Time) (int, error) {
	tag, err := db.q(ctx).Exec(ctx, `DELETE FROM gantry_files WHERE created_at < $1`, ceilMicro(t))
	if err != nil {
		return 0, fmt.Errorf("removing expired files: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// fileReader reads a stored file a chunk at a time.
type fileReader struct {
	ctx  context.Context
	db   *DB
	name string
	size int64
	off  int64
	seq  int64  // the chunk in data; -1 = none
	data []byte // chunk seq
}

func (f *fileReader) Read(p []byte) (int, error) {
	if f.off >= f.size {
		return 0, io.EOF
	}
	if seq := f.off / fileChunk; seq != f.seq {
		var data []byte
		err := f.db.Pool.QueryRow(f.ctx, `SELECT data FROM gantry_file_chunks WHERE name = $1 AND seq = $2`, f.name, seq).Scan(&data)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, fmt.Errorf("file %s was removed while it was read: %w", f.name, io.ErrUnexpectedEOF)
		}
		if err != nil {
			return 0, fmt.Errorf("reading file %s: %w", f.name, err)
		}
		f.seq, f.data = seq, data
	}
	n := copy(p, f.data[f.off-f.seq*fileChunk:])
	f.off += int64(n)
	return n, nil
}

func (f *fileReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += f.off
	case io.SeekEnd:
		offset += f.size
	default:
		return 0, fmt.Errorf("seek: whence %d", whence)
	}
	if offset < 0 {
		return 0, fmt.Errorf("seek to %d: before the start", offset)
	}
	f.off = offset
	return offset, nil
}

func (f *fileReader) Close() error { return nil }

var _ core.FileStore = (*DB)(nil)
