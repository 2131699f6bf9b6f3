package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gantryhq/gantry/core"
)

// Pool is a place workers run: the one interface a GPU pool adapter implements (process, docker,
// kubernetes, a cloud GPU API). The scheduler decides how many workers run where and reserves
// the pool's capacity itself; a pool only starts, stops, suspends and resumes the workers it is
// told to, and reports what happens to them. adapters/adaptertest checks an implementation.
//
// Every method may be called concurrently, for different workers and for the same one.
type Pool interface {
	// Describe returns the pool's capacity: its id, GPU type, how many GPUs (or CPU slots) it
	// has, the CUDA versions its driver runs and its data center. It does not change while the
	// pool is in use.
	Describe() core.Pool
	// Start starts a worker from spec and returns once it is starting (a process forked, a
	// container created and started). Every worker that Start accepted ends with exactly one
	// WorkerExited event, sent through spec.Report, whether it crashes or is stopped.
	// An error means no worker was started and no event follows.
	Start(ctx context.Context, spec WorkerSpec) error
	// Stop stops a worker: a polite signal, then force after the adapter's grace period. It
	// returns without waiting for the exit (the WorkerExited event says when). Stopping a
	// worker that already exited, or is unknown, is not an error.
	Stop(ctx context.Context, id string) error
	// Suspend keeps a worker but stops it running (a paused process, a stopped container), so
	// that Resume brings it back faster than a fresh start. Pools that cannot return
	// ErrUnsupported. A suspended worker sends WorkerSuspended; it can still be stopped.
	Suspend(ctx context.Context, id string) error
	// Resume runs a suspended worker again and sends WorkerResumed.
	Resume(ctx context.Context, id string) error
}

// ErrUnsupported is what a pool answers to Suspend or Resume when it cannot.
var ErrUnsupported = errors.New("not supported by this pool")

// ErrNoCapacity is what a pool answers when a spec asks for more than it has (the scheduler
// reserves capacity before it starts a worker, so this means the two disagree).
var ErrNoCapacity = errors.New("not enough capacity in the pool")

// WorkerSpec is what a pool needs to start one worker.
type WorkerSpec struct {
	ID       string
	Endpoint string
	Image    string
	Args     string
	Ports    []string          // the endpoint's ports ("8000/http")
	Disk     int               // GB; 0 = the pool's default
	Env      map[string]string // the endpoint's env with the worker-protocol variables over it
	// Registry is the registry credential id the endpoint names for pulling Image ("" = none);
	// pools that pull images resolve it to stored credentials.
	Registry string
	// GPUs are the device indices reserved for the worker within its pool (for
	// CUDA_VISIBLE_DEVICES or a device request); empty on CPU pools.
	GPUs []int
	// PortEnv names the environment variables that carry the ports the worker serves HTTP on,
	// each with the port it asks for (a LOAD_BALANCER worker: {"PORT": 80, "PORT_HEALTH": 80}).
	// The pool makes each port reachable from Gantry: it may change the variables' values (the
	// process pool gives each worker free ports of the host, as workers share its network),
	// and reports where each asked-for port is reached in the WorkerRunning event's Addrs.
	PortEnv map[string]int
	// Report receives the worker's state changes. It must not block for long; it is never nil
	// when the scheduler calls Start.
	Report func(WorkerEvent)
}

// WorkerState is what a worker's event says happened.
type WorkerState int

// Worker state changes a pool reports.
const (
	WorkerRunning   WorkerState = iota + 1 // started (the process or container is up)
	WorkerSuspended                        // suspended by Suspend
	WorkerResumed                          // running again after Resume
	WorkerExited                           // gone, for good: the last event of a worker
)

func (s WorkerState) String() string {
	switch s {
	case WorkerRunning:
		return "running"
	case WorkerSuspended:
		return "suspended"
	case WorkerResumed:
		return "resumed"
	case WorkerExited:
		return "exited"
	}
	return "unknown"
}

// WorkerEvent is one state change of a worker.
type WorkerEvent struct {
	Worker string
	State  WorkerState
	At     time.Time
	// Err says why a worker exited: nil when it exited with status 0 or was stopped by Stop.
	Err error
	// Stopped is true on WorkerExited when the exit followed a Stop.
	Stopped bool
	// Addrs, on WorkerRunning, maps each port of the spec's PortEnv to the "host:port" where
	// Gantry reaches it.
	Addrs map[int]string
}

// LogSource is implemented by pools that keep their workers' output (optional): Logs returns
// the last tail lines of a worker's stdout and stderr, while it runs and after it exited, as
// long as the pool keeps them. An unknown worker is an error wrapping fs.ErrNotExist.
type LogSource interface {
	Logs(ctx context.Context, id string, tail int) (io.ReadCloser, error)
}

// Devices is a pool's account of its device indices (GPUs, or CPU slots): which ones live
// workers hold. Adapters use it to refuse a spec the scheduler's reservations should never
// produce. It is not safe for concurrent use: the adapter's own lock guards it.
type Devices []bool

// NewDevices returns the account of a pool of n devices, all free.
func NewDevices(n int) Devices { return make(Devices, n) }

// Hold takes gpus for a worker, or takes nothing and says why not: more than the pool has,
// out of range, asked twice or in use (errors wrap ErrNoCapacity).
func (d Devices) Hold(gpus []int) error {
	if len(gpus) > len(d) {
		return fmt.Errorf("%d devices asked of a pool of %d: %w", len(gpus), len(d), ErrNoCapacity)
	}
	for i, g := range gpus {
		switch {
		case g < 0 || g >= len(d):
			return fmt.Errorf("device %d is out of range (the pool has %d): %w", g, len(d), ErrNoCapacity)
		case slices.Contains(gpus[:i], g):
			return fmt.Errorf("device %d asked twice: %w", g, ErrNoCapacity)
		case d[g]:
			return fmt.Errorf("device %d is in use: %w", g, ErrNoCapacity)
		}
	}
	for _, g := range gpus {
		d[g] = true
	}
	return nil
}

// Free gives back devices Hold took.
func (d Devices) Free(gpus []int) {
	for _, g := range gpus {
		d[g] = false
	}
}

// CheckPool checks what every adapter's config shares: the pool's description, which it
// completes (the adapter's name by default, CUDA versions sorted), the machine names of its
// devices (one per device, or none) and the stop grace. It returns the completed description
// and each problem found.
func CheckPool(d core.Pool, adapter string, devices []string, stopGrace time.Duration) (core.Pool, []error) {
	d.Adapter = cmp.Or(d.Adapter, adapter)
	var errs []error
	if d.ID == "" || d.GPUType == "" {
		errs = append(errs, errors.New("the pool needs an ID and a GPUType"))
	}
	if d.Adapter != adapter {
		errs = append(errs, fmt.Errorf("adapter %q; want %s", d.Adapter, adapter))
	}
	if d.GPUs <= 0 || d.PerWorker < 0 {
		errs = append(errs, fmt.Errorf("count %d, maxGpusPerWorker %d: want count > 0 and maxGpusPerWorker >= 0", d.GPUs, d.PerWorker))
	}
	cuda, err := core.SortCUDAVersions(d.CUDAVersions)
	if err != nil {
		errs = append(errs, err)
	}
	d.CUDAVersions = cuda
	if devices != nil && len(devices) != d.GPUs {
		errs = append(errs, fmt.Errorf("%d device names for %d GPUs", len(devices), d.GPUs))
	}
	if stopGrace < 0 {
		errs = append(errs, fmt.Errorf("stop grace %v is negative", stopGrace))
	}
	return d, errs
}

// Live is an adapter's registry of its live workers (from Start until their exit) and of the
// devices they hold. It is safe for concurrent use.
type Live[W any] struct {
	mu      sync.Mutex
	workers map[string]W
	held    Devices
}

// NewLive returns the registry of a pool of n devices, with no worker.
func NewLive[W any](n int) *Live[W] {
	return &Live[W]{workers: map[string]W{}, held: NewDevices(n)}
}

// Add registers worker id, holding gpus; or registers nothing and says why not: the id is
// live already, or the devices cannot be held (see Devices.Hold).
func (l *Live[W]) Add(id string, gpus []int, w W) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.workers[id]; dup {
		return errors.New("the pool already runs a worker with this id")
	}
	if err := l.held.Hold(gpus); err != nil {
		return err
	}
	l.workers[id] = w
	return nil
}

// Remove forgets worker id and frees the gpus Add held for it; it is called once for each
// worker Add registered.
func (l *Live[W]) Remove(id string, gpus []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held.Free(gpus)
	delete(l.workers, id)
}

// Get returns a live worker.
func (l *Live[W]) Get(id string) (W, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.workers[id]
	return w, ok
}

// All returns the live workers, in no order.
func (l *Live[W]) All() []W {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Collect(maps.Values(l.workers))
}
