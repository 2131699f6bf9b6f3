package adaptertest

// This file runs a test's stand-in for a container: a local process with exactly the
// environment it is given (none of the test's own), its output read line by line, stopped
// politely (SIGTERM) and then by force after a grace period. The fake clouds and the test
// kubelet use it to run pods' containers.

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is a running stand-in container.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	code int
	once sync.Once
}

// StartProcess runs argv with env ("K=V" each) and calls log for each line it writes to stdout or
// stderr (log may be nil, and may block briefly).
func StartProcess(argv, env []string, log func(line string)) (*Process, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("starting a process: no command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		_ = pw.Close()
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if log != nil {
				log(sc.Text())
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = cmd.Wait()
		_ = pw.Close()
		<-read
		p.code = cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	return p, nil
}

// Done is closed once the process has exited and its output has been read.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitCode waits for the process and returns its exit status (-1 when a signal ended it).
func (p *Process) ExitCode() int {
	<-p.done
	return p.code
}

// Kill ends the process at once (SIGKILL) and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop sends SIGTERM once, kills the process after grace, and returns once it has exited. It
// may be called more than once, and concurrently.
func (p *Process) Stop(grace time.Duration) {
	p.once.Do(func() { _ = p.cmd.Process.Signal(syscall.SIGTERM) })
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	p.Kill()
}
