package process

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gantryhq/gantry/scheduler"
)

// BuiltinPrefix names the built-in workers: image "gantry/echo" runs `gantry worker echo`.
const BuiltinPrefix = "gantry/"

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

// builtin reports whether the image runs a built-in worker (and is not mapped by the config).
func (l *Launcher) builtin(image string) bool {
	if _, mapped := l.Images[image]; mapped {
		return false
	}
	name, ok := strings.CutPrefix(image, BuiltinPrefix)
	return ok && slices.Contains(l.Builtins, name)
}

// command returns the command line for an image.
func (l *Launcher) command(image string) ([]string, error) {
	if argv, ok := l.Images[image]; ok && len(argv) > 0 {
		return argv, nil
	}
	if l.builtin(image) {
		return []string{l.Self, "worker", strings.TrimPrefix(image, BuiltinPrefix)}, nil
	}
	known := []string{}
	for _, b := range l.Builtins {
		known = append(known, BuiltinPrefix+b)
	}
	for img := range l.Images {
		known = append(known, img)
	}
	sort.Strings(known)
	return nil, fmt.Errorf("the process pool has no command for image %q: map it under `images:` in the config file (known: %s)", image, strings.Join(known, ", "))
}

// Launch starts one worker process.
func (l *Launcher) Launch(spec scheduler.WorkerSpec) (scheduler.Worker, error) {
	argv, err := l.command(spec.Image)
	if err != nil {
		return nil, err
	}
	argv = append(append([]string{}, argv...), strings.Fields(spec.Args)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	env := []string{}
	for _, k := range []string{"PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH", "GOCOVERDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	if _, set := spec.Env["GOMAXPROCS"]; !set && l.builtin(spec.Image) {
		// Built-in workers wait on HTTP, and many share a machine: one thread each is faster
		// (less scheduling across processes) unless the endpoint's env says otherwise.
		env = append(env, "GOMAXPROCS=1")
	}
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if l.LogDir != "" {
		if err := os.MkdirAll(l.LogDir, 0o700); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(filepath.Join(l.LogDir, spec.ID+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, err
		}
		defer f.Close() // the child has its own descriptor
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
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
