package process

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/gantryhq/gantry/adapters/kit"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// DefaultStopGrace is how long Stop waits after SIGTERM before SIGKILL when Config.StopGrace
// is 0.
const DefaultStopGrace = 10 * time.Second

// Config configures a Pool. It is also a process pool's section in the config file
// (pools[].process, optional): the fields with a yaml key are read from there, and Build
// fills in the others from the pool's description and the server. New validates it once.
type Config struct {
	// Pool describes the pool as the catalog shows it: ID and GPUType are required, GPUs (the
	// number of GPUs, or of CPU slots when CPU is set) must be > 0, CUDAVersions are
	// "major.minor" values (New sorts them and drops repeats). Adapter defaults to "process".
	Pool core.PoolInfo `yaml:"-"`
	// Self is the path of this binary: image "gantry/NAME" runs `Self worker NAME` for each
	// NAME in Builtins. Required when Builtins is not empty.
	Self string `yaml:"-"`
	// Builtins are the built-in worker names `gantry worker` knows ("echo").
	Builtins []string `yaml:"-"`
	// Images maps an image to the command line that runs it (argv[0] looked up in PATH, no
	// shell); a spec's Args are appended, split at spaces. A mapped image wins over a built-in.
	Images map[string][]string `yaml:"-"`
	// LogDir is the directory of the workers' logs: a worker's stdout and stderr are appended
	// to LogDir/<worker id>.log (the directory is created, mode 0700). "" discards them.
	LogDir string `yaml:"-"`
	// StopGrace is how long Stop waits after SIGTERM before it sends SIGKILL; 0 means
	// DefaultStopGrace (10 s).
	StopGrace time.Duration `yaml:"-"`
	// User is who the workers run as: a user name, a uid, or "uid:gid"; "" = the server's own
	// user. Root (uid 0) is refused: a worker runs the operator's command with an endpoint's
	// env and args, tenant input, and must not reach the server's data. Another user than the
	// server's needs a server running as root; the worker then gets that user's group,
	// supplementary groups and home (HOME), and the user must be able to run Self (New checks)
	// and the images' commands. When Self is the running binary, in a directory the user cannot
	// search (`go run`, /root/go/bin), built-in workers run it through /proc/self/exe.
	// In the config file (Build): unset = nobody when the server runs as root (uid 65534
	// where no user nobody exists), else the server's own user, which a worker then shares
	// (it can read the data directory: the server warns).
	User string `yaml:"user"`
	// Devices names the machine's GPUs behind the pool's device indices, as
	// CUDA_VISIBLE_DEVICES accepts them (GPU UUIDs, or machine indices): device i of the pool
	// is Devices[i]. nil = the indices themselves (the pool holds GPUs 0..count-1). LocalDevices
	// gives them for discovered pools, whose GPUs of one type need not be numbered from 0.
	Devices []string `yaml:"-"`
	// VolumeRoot is the directory that keeps the network volumes the pool stores, one
	// directory each (<VolumeRoot>/<volume id>, owned by the workers' user); "" = the pool
	// keeps none. See volume.go for how a worker sees its volume.
	VolumeRoot string `yaml:"volumeRoot"`
	// VolumeSize says how a volume's size is kept (kit.VolumeDirs): "filesystem" makes each
	// volume an ext4 filesystem of its size on a loop device (root, CAP_SYS_ADMIN, loop
	// devices, e2fsprogs), so a write past it fails with ENOSPC; "report" keeps a plain
	// directory and warns when it holds more; "auto" (or "") is filesystem where it can be,
	// else report with a warning at start saying why.
	VolumeSize string `yaml:"volumeSize"`
}

// Pool is the process adapter's pool.Pool: it runs each worker as a local process in its
// own process group, as Config.User when one is given. Built-in images run this binary's
// `worker NAME`; other images run the command the config maps them to. A worker gets a few
// variables of the server's environment (PATH, HOME, LANG, TMPDIR, PYTHONPATH, GOCOVERDIR;
// HOME is the user's own with Config.User), the spec's env (a name core.RefusedEnv refuses
// fails the start), and on GPU pools CUDA_VISIBLE_DEVICES set to its device indices ("0,3";
// "" hides every GPU from a worker given none); on CPU pools nothing is added. A worker that
// serves HTTP (spec.PortEnv) gets free ports of the host and HOST=127.0.0.1, the address to
// listen on, over the spec's env. Workers die with the server (Pdeathsig).
//
// Stop sends SIGTERM to the worker's process group, then SIGKILL after StopGrace. When the
// worker's main process exits, whatever is left of its process group is killed too, so a
// crashed worker leaves no children behind.
//
// FLASHBOOT with this adapter means a paused process: Suspend stops the worker's process group
// with SIGSTOP (it keeps its memory, its loaded model and its devices, and uses no CPU), and
// Resume continues it with SIGCONT, which is much faster than starting a process. A suspended
// worker can still be stopped: Stop follows SIGTERM with SIGCONT so that it can act on it.
//
// A worker whose spec has a Volume sees its directory under Config.VolumeRoot at
// /runpod-volume, in a mount namespace of its own, where Gantry runs as root; elsewhere it
// finds the directory in $GANTRY_VOLUME_PATH (VolumeWarning says so). See volume.go.
//
// The pool accounts for the device indices (or CPU slot indices) of its workers: Start refuses
// a spec that asks for more than the pool has, for an index out of range, twice, or held by a
// live worker, with an error wrapping pool.ErrNoCapacity. A worker's indices are free
// again before its WorkerExited event is sent.
type Pool struct {
	desc    core.PoolInfo
	cmds    commands
	grace   time.Duration
	devices []string // machine device names by pool index; nil = the index

	live *kit.Live[*worker] // live workers and the devices they hold

	kit.LocalVolumes           // the network volumes it keeps (pool.VolumeStorage)
	nsOnce           sync.Once // finds out nsErr
	nsErr            error     // why workers get no mount namespace for their volume; nil = they do
}

// New returns a pool running the workers cfg describes, or what is wrong with cfg.
func New(cfg Config) (*Pool, error) {
	d, errs := kit.CheckPool(cfg.Pool, "process", cfg.Devices, cfg.StopGrace)
	if len(cfg.Builtins) > 0 && cfg.Self == "" {
		errs = append(errs, errors.New("built-in workers need Self, the path of this binary"))
	}
	u, err := checkUser(cfg.User)
	selfExec := ""
	if err != nil {
		errs = append(errs, err)
	} else if u != nil && len(cfg.Builtins) > 0 && cfg.Self != "" {
		if selfExec, err = u.builtinPath(cfg.Self); err != nil {
			errs = append(errs, fmt.Errorf("built-in workers: %w; install gantry where that user can run it (e.g. /usr/local/bin)", err))
		}
	}
	for img, argv := range cfg.Images {
		if len(argv) == 0 || argv[0] == "" {
			errs = append(errs, fmt.Errorf("image %q maps to no command", img))
		}
	}
	var volumes *kit.VolumeDirs
	if cfg.VolumeRoot != "" {
		uid, gid := -1, -1 // the server's own user
		if u != nil {
			uid, gid = int(u.uid), int(u.gid)
		}
		if volumes, err = kit.NewVolumeDirs(cfg.VolumeRoot, uid, gid, 0o770, cfg.VolumeSize, nil); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("process pool %q: %w", d.ID, err)
	}
	return &Pool{
		LocalVolumes: kit.LocalVolumes{Dirs: volumes, None: fmt.Errorf("process pool %s keeps no network volumes: set its process.volumeRoot", d.ID)},
		desc:         d,
		cmds:         commands{self: cfg.Self, builtins: slices.Clone(cfg.Builtins), images: cloneImages(cfg.Images), logDir: cfg.LogDir, user: u, selfExec: selfExec},
		grace:        cmp.Or(cfg.StopGrace, DefaultStopGrace),
		devices:      slices.Clone(cfg.Devices),
		live:         kit.NewLive[*worker](d.GPUs),
	}, nil
}

func cloneImages(images map[string][]string) map[string][]string {
	out := make(map[string][]string, len(images))
	for img, argv := range images {
		out[img] = slices.Clone(argv)
	}
	return out
}

// Describe returns the pool's description (a copy).
func (p *Pool) Describe() core.PoolInfo {
	d := p.desc
	d.CUDAVersions = slices.Clone(d.CUDAVersions)
	return d
}

// Start starts the worker's process and reports WorkerRunning. The process outlives ctx.
func (p *Pool) Start(ctx context.Context, spec pool.WorkerSpec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("starting worker %s: %w", spec.ID, err)
	}
	if spec.ID == "" || spec.Report == nil {
		return fmt.Errorf("starting worker %q: the spec needs an ID and a Report", spec.ID)
	}
	w := &worker{
		id: spec.ID, gpus: slices.Clone(spec.GPUs), events: kit.NewReporter(spec.Report),
		log: p.cmds.logPath(spec.ID), exited: make(chan struct{}),
	}
	if err := p.reserve(w); err != nil {
		return fmt.Errorf("starting worker %s: %w", spec.ID, err)
	}
	portEnv, addrs, err := kit.HostPorts(spec.PortEnv)
	if err != nil {
		p.release(w)
		return fmt.Errorf("starting worker %s: %w", spec.ID, err)
	}
	w.addrs = addrs
	cmd, log, err := p.cmds.prepare(spec, append(p.deviceEnv(spec.GPUs), envList(portEnv)...)...)
	var mount *volumeMount
	if err == nil && spec.Volume != nil {
		mount, err = p.attachVolume(cmd, *spec.Volume)
	}
	if err == nil {
		err = cmd.Start()
		switch {
		case err != nil && p.cmds.user != nil && errAccess(err):
			err = fmt.Errorf("%s, as user %s: %w", cmd.Args[0], p.cmds.user, err)
		case err != nil:
			err = fmt.Errorf("%s: %w", cmd.Args[0], err)
		}
	}
	if mount != nil {
		err = mount.wait(cmd, err) // the volume mounted and the program running, or why not
	}
	if log != nil {
		_ = log.Close() // the child has its own descriptor
	}
	if err != nil {
		p.release(w)
		return fmt.Errorf("starting worker %s: %w", spec.ID, err)
	}
	w.mu.Lock()
	w.pid = cmd.Process.Pid
	w.emit(pool.WorkerRunning, nil, false)
	if w.stopping { // Stop came while the process was being started
		w.terminate(p.grace)
	}
	w.mu.Unlock()
	go p.wait(w, cmd)
	w.events.Flush()
	return nil
}

// deviceEnv is what tells a worker its devices: CUDA_VISIBLE_DEVICES on GPU pools, nothing on
// CPU pools.
func (p *Pool) deviceEnv(gpus []int) []string {
	if p.desc.CPU {
		return nil
	}
	ids := make([]string, len(gpus))
	for i, g := range gpus {
		ids[i] = strconv.Itoa(g)
		if p.devices != nil {
			ids[i] = p.devices[g]
		}
	}
	return []string{"CUDA_VISIBLE_DEVICES=" + strings.Join(ids, ",")}
}

// reserve registers a starting worker and holds its devices, or says why it cannot.
func (p *Pool) reserve(w *worker) error { return p.live.Add(w.id, w.gpus, w) }

// release frees a worker's devices and forgets it.
func (p *Pool) release(w *worker) { p.live.Remove(w.id, w.gpus) }

// lookup returns a live worker, or an error for op naming the id.
func (p *Pool) lookup(op, id string) (*worker, error) {
	if w, ok := p.live.Get(id); ok {
		return w, nil
	}
	return nil, fmt.Errorf("%s worker %s: the process pool has no such worker (it exited, or never started)", op, id)
}

// wait waits for the worker's process to exit, kills what is left of its process group, frees
// its devices and reports WorkerExited.
func (p *Pool) wait(w *worker, cmd *exec.Cmd) {
	// Until the process is reaped its pid, and so its process group's id, stays its own: only
	// then may the group be signalled without hitting a stranger.
	unreaped := waitExited(w.pid) == nil
	if unreaped {
		w.mu.Lock()
		w.dead = true
		close(w.exited)
		_ = syscall.Kill(-w.pid, syscall.SIGKILL) // children the worker left behind
		w.mu.Unlock()
	}
	err := cmd.Wait()
	if !unreaped { // waitid failed: no sweep, no more signals
		w.mu.Lock()
		w.dead = true
		close(w.exited)
		w.mu.Unlock()
	}
	p.release(w)
	w.mu.Lock()
	if w.stopping || err == nil {
		err = nil
	} else if w.log != "" {
		err = fmt.Errorf("worker %s exited: %w (log: %s)", w.id, err, w.log)
	} else {
		err = fmt.Errorf("worker %s exited: %w (no log: the pool discards worker output)", w.id, err)
	}
	w.emit(pool.WorkerExited, err, w.stopping)
	w.mu.Unlock()
	w.events.Flush()
}

// Stop sends SIGTERM to the worker's process group (and SIGCONT when it is suspended), then
// SIGKILL after the grace. Stopping an unknown, exited or stopping worker does nothing.
func (p *Pool) Stop(_ context.Context, id string) error {
	w, err := p.lookup("stopping", id)
	if err != nil {
		return nil // exited or unknown: nothing to stop
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead || w.stopping {
		return nil
	}
	w.stopping = true
	if w.pid != 0 { // else Start sends the signals once the process is up
		w.terminate(p.grace)
	}
	return nil
}

// Suspend stops the worker's process group with SIGSTOP and reports WorkerSuspended.
// Suspending a suspended worker does nothing.
func (p *Pool) Suspend(_ context.Context, id string) error {
	return p.pause(id, true)
}

// Resume continues the worker's process group with SIGCONT and reports WorkerResumed. Resuming
// a worker that is not suspended does nothing.
func (p *Pool) Resume(_ context.Context, id string) error {
	return p.pause(id, false)
}

// pause suspends (stop) or resumes (!stop) a worker.
func (p *Pool) pause(id string, stop bool) error {
	op, sig, state := "resuming", syscall.SIGCONT, pool.WorkerResumed
	if stop {
		op, sig, state = "suspending", syscall.SIGSTOP, pool.WorkerSuspended
	}
	w, err := p.lookup(op, id)
	if err != nil {
		return err
	}
	w.mu.Lock()
	switch {
	case w.dead:
		err = fmt.Errorf("%s worker %s: it has exited", op, id)
	case w.stopping:
		err = fmt.Errorf("%s worker %s: it is being stopped", op, id)
	case w.pid == 0:
		err = fmt.Errorf("%s worker %s: it is still starting", op, id)
	case w.suspended == stop:
		// already so
	default:
		if err = syscall.Kill(-w.pid, sig); err != nil {
			err = fmt.Errorf("%s worker %s: %w", op, id, err)
			break
		}
		w.suspended = stop
		w.emit(state, nil, false)
	}
	w.mu.Unlock()
	w.events.Flush()
	return err
}

// worker is one worker process and the events it has yet to report.
type worker struct {
	id     string
	gpus   []int
	events *kit.Reporter // its events, in order
	log    string        // its log file; "" when output is discarded
	exited chan struct{} // closed when the process has exited

	addrs map[int]string // where its HTTP ports are reached (spec.PortEnv)

	mu        sync.Mutex
	pid       int  // 0 while the process is being started
	stopping  bool // Stop was called
	suspended bool
	dead      bool // the process exited: its group is not signalled any more
}

// emit queues an event; w.mu is held. Events are queued under the lock, in the order of the
// changes, and reported by w.events.Flush outside it.
func (w *worker) emit(state pool.WorkerState, err error, stopped bool) {
	e := pool.WorkerEvent{Worker: w.id, State: state, At: time.Now(), Err: err, Stopped: stopped}
	if state == pool.WorkerRunning {
		e.Addrs = w.addrs
	}
	w.events.Queue(e)
}

// envList renders variables as NAME=value, sorted by name.
func envList(env map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// terminate sends SIGTERM to the worker's process group, and SIGCONT when it is suspended so
// that it can act on it, then SIGKILL after grace unless it exited; w.mu is held.
func (w *worker) terminate(grace time.Duration) {
	_ = syscall.Kill(-w.pid, syscall.SIGTERM)
	if w.suspended {
		_ = syscall.Kill(-w.pid, syscall.SIGCONT)
		w.suspended = false
	}
	go func() {
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-w.exited:
		case <-timer.C:
			w.mu.Lock()
			if !w.dead {
				_ = syscall.Kill(-w.pid, syscall.SIGKILL)
			}
			w.mu.Unlock()
		}
	}()
}

// waitExited blocks until process pid has exited, leaving it to be reaped (waitid with
// WNOWAIT, as os.Process does before it reaps).
func waitExited(pid int) error {
	const pPID = 1      // P_PID: wait for the process with the given id
	var info [16]uint64 // a siginfo_t: 128 bytes
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if errno != syscall.EINTR {
			if errno != 0 {
				return errno
			}
			return nil
		}
	}
}

var (
	_ pool.Pool         = (*Pool)(nil)
	_ pool.ImageChecker = (*Pool)(nil)
)

// Adapter is the process adapter as the config file names it (adapter: process, the
// default).
var Adapter = kit.Adapter[Config]{Name: "process", Build: Build}

// Build makes a process pool from its description and its section (nil: the defaults), with
// the server's executable, built-in workers, images, log directory and the GPUs discovery
// named (env). Its workers run as the section's user; unset, as nobody when the server runs
// as root, else as the server's own user, which is logged as a warning.
func Build(_ context.Context, env kit.Env, desc core.PoolInfo, c *Config) (pool.Pool, error) {
	cfg := Config{}
	if c != nil {
		cfg = *c
	}
	cfg.User = runAs(c, os.Geteuid())
	if os.Geteuid() != 0 { // then no other user is possible: New refuses one
		env.Log.Warn("process pool workers run as the server's own user: an endpoint's worker can read the data directory; "+
			"run gantry serve as root (workers then run as process.user, default nobody) to keep them apart",
			"pool", desc.ID, "uid", os.Geteuid())
	}
	cfg.Pool, cfg.Self, cfg.Builtins, cfg.Images, cfg.LogDir, cfg.Devices = desc, env.Self, env.Builtins, env.Images, env.LogDir, env.Devices
	cfg.VolumeRoot = cmp.Or(cfg.VolumeRoot, env.VolumeRoot)
	return New(cfg)
}

// runAs is who a pool's workers run as on a server running as euid: the section's user;
// unset, nobody when the server runs as root (uid and gid 65534, the usual nobody and
// nogroup, where the user database has no nobody, as in the scratch image), else "" (the
// server's own user, the only one it can start processes as).
func runAs(c *Config, euid int) string {
	if c != nil && c.User != "" {
		return c.User
	}
	if euid != 0 {
		return ""
	}
	if _, err := user.Lookup("nobody"); err != nil {
		return "65534:65534"
	}
	return "nobody"
}
