package process

import (
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/gantryhq/gantry/scheduler"
)

// Launcher starts workers as local processes. Built-in images run this binary's
// `worker NAME`; other images run the command the config maps them to. Each worker gets the
// endpoint's env and the worker-protocol variables, dies with the server (Pdeathsig), and
// writes its output to LogDir/<worker id>.log.
type Launcher struct {
	Self     string              // this binary, for built-in workers
	Builtins []string            // names `gantry worker` knows
	Images   map[string][]string // image -> command line
	LogDir   string
	// StopGrace is how long a stopped worker has to exit after SIGTERM before SIGKILL.
	StopGrace time.Duration
}

func (l *Launcher) commands() commands {
	return commands{self: l.Self, builtins: l.Builtins, images: l.Images, logDir: l.LogDir}
}

// command returns the command line for an image.
func (l *Launcher) command(image string) ([]string, error) { return l.commands().command(image) }

// Launch starts one worker process.
func (l *Launcher) Launch(spec scheduler.WorkerSpec) (scheduler.Worker, error) {
	cmd, log, err := l.commands().prepare(spec)
	if err != nil {
		return nil, err
	}
	if log != nil {
		defer log.Close() // the child has its own descriptor
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Args[0], err)
	}
	p := &proc{cmd: cmd, grace: l.StopGrace, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	return p, nil
}

type proc struct {
	cmd    *exec.Cmd
	grace  time.Duration
	exited chan struct{}
	err    error
	once   sync.Once
}

func (p *proc) Wait() error { <-p.exited; return p.err }

// Stop sends SIGTERM to the worker's process group, then SIGKILL after the grace period.
func (p *proc) Stop() {
	p.once.Do(func() {
		pgid := -p.cmd.Process.Pid
		_ = syscall.Kill(pgid, syscall.SIGTERM)
		grace := p.grace
		if grace == 0 {
			grace = 10 * time.Second
		}
		go func() {
			select {
			case <-p.exited:
			case <-time.After(grace):
				_ = syscall.Kill(pgid, syscall.SIGKILL)
			}
		}()
	})
}

var _ scheduler.Launcher = (*Launcher)(nil)
