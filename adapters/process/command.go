package process

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/gantryhq/gantry/adapters/kit"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// BuiltinPrefix names the built-in workers: image "gantry/echo" runs `gantry worker echo`.
const BuiltinPrefix = "gantry/"

// hostEnv lists the only variables of the server's own environment a worker inherits: the
// server's secrets (store URLs, keys) stay out of workers.
var hostEnv = []string{"PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH", "GOCOVERDIR"}

// commands maps images to command lines and builds a worker's process: the part of starting a
// worker of the Pool.
type commands struct {
	self     string              // this binary, for built-in workers
	builtins []string            // names `gantry worker` knows
	images   map[string][]string // image -> command line, over the built-ins
	logDir   string              // where LOGDIR/<worker id>.log goes; "" discards the output
	user     *workerUser         // who workers run as; nil = the server's user
	selfExec string              // what built-in workers execute when not self ("/proc/self/exe")
}

// builtin reports whether the image runs a built-in worker (and is not mapped by the config).
func (c commands) builtin(image string) bool {
	if _, mapped := c.images[image]; mapped {
		return false
	}
	name, ok := strings.CutPrefix(image, BuiltinPrefix)
	return ok && slices.Contains(c.builtins, name)
}

// command returns the command line for an image.
func (c commands) command(image string) ([]string, error) {
	if argv, ok := c.images[image]; ok && len(argv) > 0 {
		return argv, nil
	}
	if c.builtin(image) {
		return []string{c.self, "worker", strings.TrimPrefix(image, BuiltinPrefix)}, nil
	}
	known := []string{}
	for _, b := range c.builtins {
		known = append(known, BuiltinPrefix+b)
	}
	for img := range c.images {
		known = append(known, img)
	}
	sort.Strings(known)
	return nil, fmt.Errorf("the process pool has no command for image %q: map it under `images:` in the config file (known: %s)", image, strings.Join(known, ", "))
}

// CanRun reports whether the pool can run the image: a built-in one or one the config maps
// to a command. It implements pool.ImageChecker, so that an endpoint whose jobs would
// wait forever is refused when it is created.
func (p *Pool) CanRun(image string) (ok bool, why string) {
	if _, err := p.cmds.command(image); err == nil {
		return true, ""
	}
	return false, fmt.Sprintf("pool %s (process) has no images: entry for %q; map it to the command that runs it under images: in the config file (images: {%q: [python3, handler.py]}), or use a built-in image (%s)",
		p.desc.ID, image, image, strings.Join(p.cmds.builtinImages(), ", "))
}

// builtinImages returns the built-in images the config does not map elsewhere, sorted.
func (c commands) builtinImages() []string {
	var out []string
	for _, b := range c.builtins {
		if c.builtin(BuiltinPrefix + b) {
			out = append(out, BuiltinPrefix+b)
		}
	}
	sort.Strings(out)
	return out
}

// logPath is where a worker's output goes; "" when it is discarded.
func (c commands) logPath(id string) string {
	if c.logDir == "" {
		return ""
	}
	return filepath.Join(c.logDir, id+".log")
}

// prepare builds the process of one worker, not started: the image's command line with the
// spec's args; an environment of the few host variables in hostEnv (HOME the worker user's),
// GOMAXPROCS=1 for built-in workers (unless the spec sets it), the spec's env, then extraEnv
// over them all; the worker user's credentials; its own process group, killed with the
// server (Pdeathsig); output appended to its log file. A spec whose env has a name
// core.RefusedEnv refuses (an endpoint stored before the rule) is refused. The
// caller closes the returned log file (nil when output is discarded) once the process started
// or failed to: the child has its own descriptor.
func (c commands) prepare(spec pool.WorkerSpec, extraEnv ...string) (*exec.Cmd, *os.File, error) {
	argv, err := c.command(spec.Image)
	if err != nil {
		return nil, nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		if why, refused := core.RefusedEnv(k); refused {
			return nil, nil, fmt.Errorf("the endpoint's env sets %s, which the process pool refuses (%s): remove it from the endpoint's env", k, why)
		}
	}
	argv = append(slices.Clone(argv), strings.Fields(spec.Args)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	if c.selfExec != "" && c.builtin(spec.Image) {
		cmd.Path = c.selfExec // argv[0] stays Self, for ps and the worker
	}
	env := []string{}
	for _, k := range hostEnv {
		if v, ok := os.LookupEnv(k); ok && (k != "HOME" || c.user == nil) {
			env = append(env, k+"="+v)
		}
	}
	if c.user != nil && c.user.home != "" {
		env = append(env, "HOME="+c.user.home)
	}
	if _, set := spec.Env["GOMAXPROCS"]; !set && c.builtin(spec.Image) {
		// Built-in workers wait on HTTP, and many share a machine: one thread each is faster
		// (less scheduling across processes) unless the endpoint's env says otherwise.
		env = append(env, "GOMAXPROCS=1")
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, k+"="+spec.Env[k])
	}
	cmd.Env = append(env, extraEnv...) // exec keeps the last value of a repeated variable
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if c.user != nil {
		// Go sets Pdeathsig after it switches credentials (which clear it), so it holds.
		cmd.SysProcAttr.Credential = c.user.credential()
	}
	path := c.logPath(spec.ID)
	if path == "" {
		return cmd, nil, nil
	}
	if err := os.MkdirAll(c.logDir, 0o700); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	return cmd, f, nil
}

// Logs returns the last tail lines of a worker's output (all of it when tail <= 0), running or
// exited, from its log file. It implements pool.LogSource; a worker with no log file is an
// error wrapping fs.ErrNotExist.
func (p *Pool) Logs(_ context.Context, id string, tail int) (io.ReadCloser, error) {
	path := p.cmds.logPath(id)
	if path == "" || strings.ContainsAny(id, `/\`) {
		return nil, fmt.Errorf("worker %s: %w", id, fs.ErrNotExist)
	}
	return kit.TailFile(path, tail)
}

var _ pool.LogSource = (*Pool)(nil)
