// Package pool is the contract between the scheduler and the GPU pool adapters: Pool, the one
// interface every adapter implements, the optional capabilities the scheduler looks for
// (Elastic, HealthReporter, WorkerLister, Adopter, VolumeStorage, LogSource, ImageChecker,
// Killer), and the worker specs and events that cross it. It imports only core, so that an
// adapter (adapters/...) depends on the contract and never on the scheduler that drives it;
// adapters/adaptertest checks an implementation.
package pool

import (
	"context"
	"errors"
	"io"
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
	// Describe returns the pool's description: its id, GPU type, how many GPUs (or CPU slots)
	// it has, the CUDA versions its driver runs and its data center. It does not change while
	// the pool is in use, except for the count of an Elastic pool (see Elastic.Capacity).
	Describe() core.PoolInfo
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

// Elastic is implemented by pools whose capacity changes while in use and whose nodes assign
// the devices themselves (a Kubernetes cluster: nodes come and go, other tenants take GPUs,
// and the device plugin picks a pod's GPUs). The scheduler reserves a count against Capacity,
// and the WorkerSpec of such a pool has no device indices, only GPUCount.
type Elastic interface {
	Pool
	// Capacity returns how many GPUs (or CPU slots) the pool's workers may hold in all right
	// now: the workers it runs included, what others hold excluded. The placer asks it at
	// every placement, so it must answer from memory (a watch's cache), without blocking.
	// When it drops below what the scheduler holds, placements wait for workers to exit.
	Capacity() int
}

// HealthReporter is implemented by pools that can be unable to start any worker for a while
// for a reason of their own (a cloud API that refuses the pool's key): Health says why, in the
// pool's words, or nil while the pool can start workers. The catalog shows the reason. It must
// answer from memory, without blocking.
type HealthReporter interface {
	Health() error
}

// WorkerLister is implemented by pools whose workers may outlive the server or be found
// without it (containers, pods): Workers lists the live ones, those Start accepted and those
// an earlier run of Gantry left, so that the scheduler can reap the workers it does not know.
type WorkerLister interface {
	LiveWorkers(ctx context.Context) ([]LiveWorker, error)
}

// LiveWorker is one worker a pool runs, as WorkerLister sees it.
type LiveWorker struct {
	ID       string
	Endpoint string    // the endpoint it runs for
	Started  time.Time // when it was created; zero when the pool cannot tell
	// Known is true for the workers this pool's Start accepted since it was made; false for
	// those it found (left by an earlier run, or by another replica).
	Known bool
	// Revision is the WorkerSpec.Revision it was started with, Count the GPUs (or CPU slots)
	// it holds: what an Adopter needs for the scheduler to take it over. "" and 0 when the
	// pool cannot tell.
	Revision string
	Count    int
}

// Adopter is implemented by Elastic pools that can take over a worker they list but did not
// start (LiveWorker.Known false: left by an earlier run of Gantry or by the previous leader),
// so that a restart or a change of leader keeps running workers instead of starting them
// again. After Adopt returns nil the pool reports the worker's events through report as for a
// worker it started: WorkerRunning once it runs (at once, if it does), then exactly one
// WorkerExited. An error means the pool did not take it over and sends no event.
type Adopter interface {
	WorkerLister
	Adopt(ctx context.Context, w LiveWorker, report func(WorkerEvent)) error
}

// VolumeStorage is implemented by pools that keep network volumes for their data center: a
// directory on a local host, a Kubernetes PersistentVolumeClaim, a RunPod network volume. The
// config says which pool stores a data center's volumes. Every method is idempotent, so that
// a replica or a restart may call it again.
type VolumeStorage interface {
	// EnsureVolume makes v's storage if it does not exist, or grows it to v.SizeGB; it never
	// shrinks one. It returns once the storage can be mounted.
	EnsureVolume(ctx context.Context, v core.Volume) error
	// DeleteVolume removes a volume's storage and its data; an unknown volume is not an
	// error. The caller has checked that no endpoint names it.
	DeleteVolume(ctx context.Context, v core.Volume) error
	// VolumeUsage reports the bytes a volume holds, where the storage can tell (-1 if not).
	VolumeUsage(ctx context.Context, v core.Volume) (int64, error)
}

// VolumeWarner is implemented by pools that cannot always mount a network volume at
// core.VolumeMountPath: VolumeWarning says what they do instead ("" when they mount it), e.g.
// a process pool without root passes the volume's path in an environment variable. An
// endpoint naming a volume whose workers may land on such a pool is warned when it is created
// or updated. It must answer from memory.
type VolumeWarner interface {
	VolumeWarning() string
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
	// Revision names what the worker runs: it changes when the endpoint changes in a way that
	// needs new workers. A WorkerLister keeps it with the worker and lists it back.
	Revision string
	Image    string
	Args     string
	Ports    []string          // the endpoint's ports ("8000/http")
	Disk     int               // GB; 0 = the pool's default
	Env      map[string]string // the endpoint's env with the worker-protocol variables over it
	// Registry is the registry credential id the endpoint names for pulling Image ("" = none);
	// pools that pull images resolve it to stored credentials.
	Registry string
	// GPUs are the device indices reserved for the worker within its pool (for
	// CUDA_VISIBLE_DEVICES or a device request); empty on CPU pools and on Elastic pools,
	// whose nodes assign devices.
	GPUs []int
	// GPUCount is how many GPUs (or CPU slots) the worker holds: len(GPUs) where the pool
	// has device indices.
	GPUCount int
	// CUDAVersions are the endpoint's allowedCudaVersions ("12.4"; empty = any). Placement
	// chose a pool that offers one of them; a pool that rents machines (RunPod) asks for one
	// that runs one of them.
	CUDAVersions []string
	// PortEnv names the environment variables that carry the ports the worker serves HTTP on,
	// each with the port it asks for (a LOAD_BALANCER worker: {"PORT": 80, "PORT_HEALTH": 80}).
	// The pool makes each port reachable from Gantry: it may change the variables' values (the
	// process pool gives each worker free ports of the host, as workers share its network),
	// and reports where each asked-for port is reached in the WorkerRunning event's Addrs.
	PortEnv map[string]int
	// Volume is the network volume the worker sees at core.VolumeMountPath, read-write: the
	// one of the endpoint's networkVolumes in this pool's data center; nil = none. The
	// pool's VolumeStorage has made it (EnsureVolume) before the scheduler starts the worker.
	// A pool that cannot mount it fails the worker (WorkerExited, Err saying why) rather than
	// run it without its volume.
	Volume *core.Volume
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
	// WorkerWaiting says the pool accepted the worker but cannot run it yet for want of room
	// (a pod its cluster's scheduler finds no node for, while an autoscaler may add one); Err
	// says why, in the pool's words. The worker counts as throttled, not as failing to start,
	// until WorkerRunning (its start) or WorkerExited.
	WorkerWaiting
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
	case WorkerWaiting:
		return "waiting"
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

// ImageChecker is implemented by pools that know which images they can run (optional): the
// process pool runs only the built-in images and those its config maps to a command. CanRun
// answers false with why and the fix when the pool cannot run image; a pool that pulls
// images on demand does not implement it.
type ImageChecker interface {
	CanRun(image string) (ok bool, why string)
}

// WorkerURLOwner is implemented by pools whose workers reach Gantry at a URL of the pool's own
// config (a Kubernetes pool's workerUrl, a RunPod pool's publicUrl) rather than at the base URL
// of the worker-protocol variables the scheduler hands them (RUNPOD_WEBHOOK_*, which such a
// pool rebases). The scheduler spreads only the other pools' workers over the replicas (it
// gives each the URL of one and stops it when that replica leaves); these reach the replicas
// through their own URL, a load balancer or a Service in front of them.
type WorkerURLOwner interface {
	OwnsWorkerURL() bool
}

// Killer is implemented by pools that can end a worker at once, with no polite signal and no
// grace (SIGKILL; it ends a process stopped with SIGSTOP too). The scheduler kills a worker the
// job engine declared lost: it stopped answering, so a polite stop would only wait out the
// grace. Pools without it get Stop (a polite signal, then force after their grace).
type Killer interface {
	// Kill ends a worker at once; its WorkerExited event follows as after Stop. Killing a
	// worker that already exited, or is unknown, is not an error.
	Kill(ctx context.Context, id string) error
}
