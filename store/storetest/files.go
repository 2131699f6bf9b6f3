package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// RunFileStore runs the conformance suite of core.FileStore: the contents of produced files and
// what is known of them (size, creation time). Names are of the form core.Files makes.
func RunFileStore(t *testing.T, open Opener[core.FileStore]) {
	t.Helper()
	ctx := context.Background()
	// contents returns n bytes that differ from name to name and hold every byte value.
	contents := func(name string, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i) ^ name[i%len(name)]
		}
		return b
	}
	create := func(t *testing.T, st core.FileStore, name string, data []byte, created time.Time) {
		t.Helper()
		n, err := st.CreateFile(ctx, name, bytes.NewReader(data), core.MaxFileBytes, created)
		if err != nil || n != int64(len(data)) {
			t.Fatalf("CreateFile(%q, %d bytes) = %d, %v; want %d, nil", name, len(data), n, err, len(data))
		}
	}
	// read returns a file's contents and information, or the error of OpenFile.
	read := func(t *testing.T, st core.FileStore, name string) ([]byte, core.FileInfo, error) {
		t.Helper()
		rc, info, err := st.OpenFile(ctx, name)
		if err != nil {
			return nil, info, err
		}
		defer func() { _ = rc.Close() }()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatalf("reading %q: %v", name, err)
		}
		return b, info, nil
	}
	// check fails the test unless name holds want, created at created.
	check := func(t *testing.T, st core.FileStore, name string, want []byte, created time.Time) {
		t.Helper()
		got, info, err := read(t, st, name)
		if err != nil {
			t.Fatalf("OpenFile(%q) err = %v; want nil", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("OpenFile(%q) read %d bytes that differ from the %d written", name, len(got), len(want))
		}
		if info.Size != int64(len(want)) || !info.Created.Equal(created) {
			t.Errorf("OpenFile(%q) info = %+v; want size %d, created %v", name, info, len(want), created)
		}
	}
	gone := func(t *testing.T, st core.FileStore, name, why string) {
		t.Helper()
		if _, _, err := read(t, st, name); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("OpenFile(%q) %s: err = %v; want core.ErrNotFound", name, why, err)
		}
	}

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		for name, size := range map[string]int{"job-1-a.png": 100_000, "job-1-b.wav": 1, "job-1-c.gif": 0} {
			data := contents(name, size)
			create(t, st, name, data, base)
			check(t, st, name, data, base)
		}
	})

	t.Run("Seek", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		data := contents("seek.png", 1000)
		create(t, st, "seek.png", data, base)
		rc, _, err := st.OpenFile(ctx, "seek.png")
		if err != nil {
			t.Fatalf("OpenFile(%q) err = %v; want nil", "seek.png", err)
		}
		defer func() { _ = rc.Close() }()
		for _, tt := range []struct {
			offset int64
			whence int
			at     int64
		}{{600, io.SeekStart, 600}, {-10, io.SeekEnd, 990}, {-500, io.SeekCurrent, 500}, {0, io.SeekStart, 0}} {
			pos, err := rc.Seek(tt.offset, tt.whence)
			if err != nil || pos != tt.at {
				t.Fatalf("Seek(%d, %d) = %d, %v; want %d, nil", tt.offset, tt.whence, pos, err, tt.at)
			}
			buf := make([]byte, 10)
			if _, err := io.ReadFull(rc, buf); err != nil || !bytes.Equal(buf, data[tt.at:tt.at+10]) {
				t.Errorf("10 bytes read at %d = %v, %v; want %v", tt.at, buf, err, data[tt.at:tt.at+10])
			}
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		create(t, st, "job-2-x.png", []byte("x"), base)
		for _, name := range []string{"job-2-y.png", "job-2-x.gif", "job-2-x", "job-2-x.png.tmp", "", ".", "..", "../job-2-x.png", "./job-2-x.png", "/etc/passwd", "a/b.png", ".hidden"} {
			gone(t, st, name, "of a name never created")
		}
	})

	t.Run("NeverOverwrites", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		first := contents("first", 64)
		create(t, st, "job-3-a.png", first, base)
		if _, err := st.CreateFile(ctx, "job-3-a.png", bytes.NewReader([]byte("second")), core.MaxFileBytes, base.Add(time.Hour)); err == nil {
			t.Errorf("CreateFile of an existing name = nil; want an error")
		}
		check(t, st, "job-3-a.png", first, base)
	})

	t.Run("TooLarge", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		const max = 1000
		if n, err := st.CreateFile(ctx, "job-4-max.png", bytes.NewReader(contents("max", max)), max, base); err != nil || n != max {
			t.Errorf("CreateFile of exactly max bytes = %d, %v; want %d, nil", n, err, max)
		}
		_, err := st.CreateFile(ctx, "job-4-big.png", bytes.NewReader(contents("big", max+1)), max, base)
		if core.KindOf(err) != core.KindTooLarge {
			t.Errorf("CreateFile of max+1 bytes err = %v (kind %v); want kind %v", err, core.KindOf(err), core.KindTooLarge)
		}
		gone(t, st, "job-4-big.png", "after a refused create")
		create(t, st, "job-4-big.png", []byte("small"), base) // the name is free
	})

	t.Run("ReaderFails", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		boom := errors.New("the worker's upload broke")
		r := io.MultiReader(bytes.NewReader(contents("part", 300)), errReader{boom})
		if _, err := st.CreateFile(ctx, "job-5-a.png", r, core.MaxFileBytes, base); !errors.Is(err, boom) {
			t.Errorf("CreateFile from a failing reader err = %v; want %v", err, boom)
		}
		gone(t, st, "job-5-a.png", "after a failed create")
		create(t, st, "job-5-a.png", []byte("whole"), base)
	})

	t.Run("RemoveBefore", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		for i, name := range []string{"job-6-a.png", "job-6-b.png", "job-6-c.png", "job-6-d.png"} {
			create(t, st, name, []byte(name), base.Add(time.Duration(i-2)*time.Second))
		}
		if n, err := st.RemoveBefore(ctx, base); err != nil || n != 2 {
			t.Errorf("RemoveBefore(base) = %d, %v; want 2 (created at base-2s and base-1s), nil", n, err)
		}
		gone(t, st, "job-6-a.png", "after RemoveBefore")
		gone(t, st, "job-6-b.png", "after RemoveBefore")
		check(t, st, "job-6-c.png", []byte("job-6-c.png"), base) // created at t: kept
		check(t, st, "job-6-d.png", []byte("job-6-d.png"), base.Add(time.Second))
		if n, err := st.RemoveBefore(ctx, base); err != nil || n != 0 {
			t.Errorf("RemoveBefore(base) again = %d, %v; want 0, nil", n, err)
		}
	})

	t.Run("ConcurrentCreateOneName", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		const writers = 8
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				data := contents(fmt.Sprintf("writer %d", w), 4096)
				_, errs[w] = st.CreateFile(ctx, "job-7-a.png", bytes.NewReader(data), core.MaxFileBytes, base.Add(time.Duration(w)*time.Second))
			})
		}
		wg.Wait()
		winner := -1
		for w, err := range errs {
			if err == nil {
				if winner >= 0 {
					t.Fatalf("writers %d and %d both created job-7-a.png; want one", winner, w)
				}
				winner = w
			}
		}
		if winner < 0 {
			t.Fatalf("no writer created job-7-a.png: %v", errs)
		}
		check(t, st, "job-7-a.png", contents(fmt.Sprintf("writer %d", winner), 4096), base.Add(time.Duration(winner)*time.Second))
	})

	t.Run("ConcurrentCreates", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		const writers = 16
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				name := fmt.Sprintf("job-8-%02d.wav", w)
				if _, err := st.CreateFile(ctx, name, bytes.NewReader(contents(name, 2048)), core.MaxFileBytes, base); err != nil {
					t.Errorf("CreateFile(%q) = %v; want nil", name, err)
				}
			})
		}
		wg.Wait()
		for w := range writers {
			name := fmt.Sprintf("job-8-%02d.wav", w)
			check(t, st, name, contents(name, 2048), base)
		}
	})

	t.Run("ContextDone", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		create(t, st, "job-9-kept.png", []byte("kept"), base)
		for _, dc := range doneContexts(t) {
			_, err := st.CreateFile(dc.ctx, "job-9-new.png", strings.NewReader("new"), core.MaxFileBytes, base)
			checkDone(t, dc, `CreateFile("job-9-new.png")`, err)
			rc, _, err := st.OpenFile(dc.ctx, "job-9-kept.png")
			checkDone(t, dc, `OpenFile("job-9-kept.png")`, err)
			if err == nil {
				_ = rc.Close()
			}
			_, err = st.RemoveBefore(dc.ctx, base.Add(time.Hour))
			checkDone(t, dc, "RemoveBefore(base+1h)", err)
		}
		gone(t, st, "job-9-new.png", "after a create with a done context")
		check(t, st, "job-9-kept.png", []byte("kept"), base)
	})

	t.Run("ContextEndsMidCopy", func(t *testing.T) {
		t.Parallel()
		st, _ := open(t)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// The body's first part arrives, then the request is abandoned while 16 MB more would
		// come: the store must stop reading soon (here, within 1 MB), not drain the body.
		const more, soon = 16 << 20, 1 << 20
		cancelled, after := false, 0
		r := io.MultiReader(bytes.NewReader(contents("part", 1000)), readFunc(func(p []byte) (int, error) {
			if !cancelled {
				cancel()
				cancelled = true
			}
			if after >= more {
				return 0, io.EOF
			}
			n := min(len(p), more-after)
			after += n
			return n, nil
		}))
		if _, err := st.CreateFile(cctx, "job-10-a.png", r, core.MaxFileBytes, base); !errors.Is(err, context.Canceled) {
			t.Errorf("CreateFile cancelled mid-copy err = %v; want context.Canceled", err)
		}
		if after > soon {
			t.Errorf("CreateFile read %d bytes after its context was cancelled; want at most %d", after, soon)
		}
		gone(t, st, "job-10-a.png", "after a create cancelled mid-copy")
		create(t, st, "job-10-a.png", []byte("again"), base)
	})

	t.Run("Durable", func(t *testing.T) {
		t.Parallel()
		st, reopen := open(t)
		reopen = durable(t, reopen)
		old, kept := contents("old", 500), contents("kept", 70_000)
		create(t, st, "job-11-old.png", old, base.Add(-time.Hour))
		create(t, st, "job-11-kept.gif", kept, base)
		st = reopen()
		check(t, st, "job-11-kept.gif", kept, base)
		check(t, st, "job-11-old.png", old, base.Add(-time.Hour))
		// Creation times survive too: expiry still tells old from new.
		if n, err := st.RemoveBefore(ctx, base.Add(-time.Minute)); err != nil || n != 1 {
			t.Errorf("RemoveBefore(base-1m) after a restart = %d, %v; want 1, nil", n, err)
		}
		gone(t, st, "job-11-old.png", "after RemoveBefore")
		check(t, st, "job-11-kept.gif", kept, base)
	})
}

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// readFunc is an io.Reader made of a function.
type readFunc func(p []byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }
