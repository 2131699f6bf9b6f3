package process

import (
	"context"
	"syscall"

	"github.com/gantryhq/gantry/pool"
)

// Kill ends the worker's process group at once with SIGKILL, which also ends a process stopped
// with SIGSTOP (a hung or suspended worker): the scheduler kills a worker that stopped
// answering. A worker being stopped politely is killed too. Killing an unknown or exited
// worker does nothing.
func (p *Pool) Kill(_ context.Context, id string) error {
	w, err := p.lookup("killing", id)
	if err != nil {
		return nil // exited or unknown: nothing to kill
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead {
		return nil
	}
	w.stopping = true
	if w.pid != 0 { // else Start stops it once the process is up, as after Stop
		_ = syscall.Kill(-w.pid, syscall.SIGKILL)
	}
	return nil
}

var _ pool.Killer = (*Pool)(nil)
