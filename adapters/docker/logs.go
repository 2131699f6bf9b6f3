package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/gantryhq/gantry/adapters/kit"
)

// Logs returns a worker's log, its stdout and stderr as plain text in the order written: the
// last tail lines, or all of it when tail <= 0. While the worker's container exists (running
// or suspended) the log comes from the engine, and ctx bounds the reading; afterwards from the
// pool's LogDir, where it is saved when the container is removed (also for workers of an
// earlier run). An id with no log answers an error wrapping fs.ErrNotExist.
func (p *Pool) Logs(ctx context.Context, id string, tail int) (io.ReadCloser, error) {
	if !validID(id) {
		return nil, fmt.Errorf("logs of worker %q: no such worker: %w", id, fs.ErrNotExist)
	}
	if w, ok := p.live.Get(id); ok {
		w.mu.Lock()
		ctr, ph := w.container, w.phase
		w.mu.Unlock()
		if ctr != "" && ph != exited {
			rc, err := p.engineLogs(ctx, ctr, tail)
			if err == nil || !cerrdefs.IsNotFound(err) {
				return rc, err
			}
			// removed meanwhile: its log is saved (or gone)
		}
	}
	if path := p.logPath(id); path != "" {
		rc, err := kit.TailFile(path, tail)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return rc, err
		}
	}
	why := "the pool keeps no log of exited workers (it has no log directory)"
	if p.cfg.LogDir != "" {
		why = "no such worker, and no saved log"
	}
	return nil, fmt.Errorf("logs of worker %s: %s: %w", id, why, fs.ErrNotExist)
}

// engineLogs reads a container's log from the engine, demultiplexed into plain text.
func (p *Pool) engineLogs(ctx context.Context, ctr string, tail int) (io.ReadCloser, error) {
	opts := client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true}
	if tail > 0 {
		opts.Tail = strconv.Itoa(tail)
	}
	rc, err := p.openStream(ctx, "ContainerLogs", func(ctx context.Context) (io.ReadCloser, error) {
		return p.api.ContainerLogs(ctx, ctr, opts)
	})
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, pw, rc)
		_ = rc.Close()
		pw.CloseWithError(err) // nil: EOF for the reader
	}()
	return pr, nil
}

// logPath is where a worker's log is saved; "" when the pool keeps none.
func (p *Pool) logPath(id string) string {
	if p.cfg.LogDir == "" {
		return ""
	}
	return filepath.Join(p.cfg.LogDir, id+".log")
}

// saveLog copies a worker's log from the engine into the log directory, when the pool has one.
func (p *Pool) saveLog(ctx context.Context, w *worker) {
	if err := p.saveLogOf(ctx, w.id, w.container); err != nil {
		p.log.Warn("saving a worker's log", "pool", p.desc.ID, "worker", w.id, "err", err)
	}
}

// saveLogOf copies the log of container ctr, worker id, to LogDir/<id>.log (through a
// temporary file, so that a reader never sees half of it).
func (p *Pool) saveLogOf(ctx context.Context, id, ctr string) error {
	path := p.logPath(id)
	if path == "" {
		return nil
	}
	if err := os.MkdirAll(p.cfg.LogDir, 0o700); err != nil {
		return err
	}
	ctx, cancel, timedOut := p.bound(ctx, kindLogs, "ContainerLogs")
	defer cancel()
	rc, err := p.api.ContainerLogs(ctx, ctr, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return timedOut(err)
	}
	defer func() { _ = rc.Close() }()
	f, err := os.CreateTemp(p.cfg.LogDir, id+".log.*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }() // after the rename: nothing
	_, err = stdcopy.StdCopy(f, f, rc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	return timedOut(err)
}

// lastLines returns the last n lines a worker's container wrote, joined with " | " and cut to
// a few hundred bytes; "" when it wrote nothing or the engine does not say.
func (p *Pool) lastLines(ctx context.Context, w *worker, n int) string {
	ctx, cancel, _ := p.bound(ctx, kindLogs, "ContainerLogs")
	defer cancel()
	rc, err := p.engineLogs(ctx, w.container, n)
	if err != nil {
		return ""
	}
	defer func() { _ = rc.Close() }()
	b, _ := io.ReadAll(io.LimitReader(rc, 64<<10))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	s := strings.Join(lines, " | ")
	const limit = 400
	if len(s) > limit {
		s = "..." + s[len(s)-limit:]
	}
	return strings.TrimSpace(s)
}
