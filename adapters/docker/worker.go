package docker

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/gantryhq/gantry/adapters/kit"
	"github.com/gantryhq/gantry/pool"
)

// phase is where a worker's container is in its life.
type phase int

const (
	starting   phase = iota // Start is creating and starting the container
	running                 // the container runs and is watched
	suspending              // SuspendStop: Suspend is stopping the container to keep it
	suspended               // paused (SuspendPause), or stopped and kept (SuspendStop)
	exited                  // gone: WorkerExited is (being) reported
)

// worker is one worker's container and the events it has yet to report.
type worker struct {
	id     string
	name   string // the container's name
	gpus   []int
	events *kit.Reporter  // its events, in order
	addrs  map[int]string // where its HTTP ports are reached (spec.PortEnv)
	gone   chan struct{}  // closed when the pool forgets it: its container is removed

	// op is held by whoever changes the container (Start, Suspend, Resume, and halt for
	// Stop), one at a time. It is taken before mu, never while mu is held.
	op sync.Mutex

	mu        sync.Mutex
	container string // the container's id; "" until it is created
	phase     phase
	stopping  bool          // Stop was called
	watched   chan struct{} // closed when the watch of the running container has ended
}

// ExitError is the error of a WorkerExited event for a container that exited by itself with a
// non-zero status. Its ExitCode method answers the status, as *exec.ExitError's does.
type ExitError struct {
	Code      int  // the container's exit status
	OOMKilled bool // the kernel killed it for running out of memory
}

func (e *ExitError) Error() string {
	if e.OOMKilled {
		return "exit status " + strconv.Itoa(e.Code) + " (killed: out of memory)"
	}
	return "exit status " + strconv.Itoa(e.Code)
}

// ExitCode returns the container's exit status.
func (e *ExitError) ExitCode() int { return e.Code }

// Start pulls the image when the host lacks it, creates and starts the worker's container and
// reports WorkerRunning. The container outlives ctx.
func (p *Pool) Start(ctx context.Context, spec pool.WorkerSpec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("starting worker %s: %w", spec.ID, err)
	}
	if spec.ID == "" || spec.Report == nil || spec.Image == "" {
		return fmt.Errorf("starting worker %q: the spec needs an ID, an Image and a Report", spec.ID)
	}
	if !validID(spec.ID) {
		return fmt.Errorf("starting worker %q: a worker id is letters, digits, '_', '.' and '-' (at most 128, not starting with a '.' or '-')", spec.ID)
	}
	w := &worker{id: spec.ID, name: containerName(p.desc.ID, spec.ID), gpus: slices.Clone(spec.GPUs), events: kit.NewReporter(spec.Report), gone: make(chan struct{})}
	w.op.Lock() // a Stop coming meanwhile waits for the container to be up (or refused)
	defer w.op.Unlock()
	if err := p.reserve(w); err != nil {
		return fmt.Errorf("starting worker %s: %w", spec.ID, err)
	}
	watch, err := p.create(ctx, w, spec)
	if err != nil {
		w.mu.Lock()
		w.phase = exited
		w.mu.Unlock()
		p.release(w)
		return fmt.Errorf("starting worker %s: %w", spec.ID, err)
	}
	w.mu.Lock()
	w.phase = running
	w.emit(pool.WorkerRunning, nil, false)
	w.mu.Unlock()
	watch() // after the running event: an exit is reported after it
	w.events.Flush()
	return nil
}

// create makes sure the image is on the host, then creates and starts the worker's container.
// It returns the function that starts watching it.
func (p *Pool) create(ctx context.Context, w *worker, spec pool.WorkerSpec) (watch func(), err error) {
	portEnv, addrs, err := kit.HostPorts(spec.PortEnv)
	if err != nil {
		return nil, err
	}
	w.addrs = addrs
	volume, err := p.volumeSource(spec.Volume) // a worker never runs without its volume
	if err != nil {
		return nil, err
	}
	if err := p.ensureImage(ctx, spec.Image, spec.Endpoint, spec.Registry); err != nil {
		return nil, err
	}
	opts := p.createOptions(spec, w.name, portEnv)
	withVolume(&opts, volume)
	created, err := engineCall(ctx, p, kindChange, "ContainerCreate", func(ctx context.Context) (client.ContainerCreateResult, error) {
		return p.api.ContainerCreate(ctx, opts)
	})
	if err != nil {
		return nil, fmt.Errorf("creating its container from %q: %w", spec.Image, err)
	}
	w.mu.Lock()
	w.container = created.ID
	w.mu.Unlock()
	if watch, err = p.run(ctx, w); err != nil {
		p.remove(w)
		return nil, err
	}
	return watch, nil
}

// run starts the worker's container (again, after SuspendStop) and returns the function that
// starts watching it: the caller reports the start first, then calls it.
func (p *Pool) run(ctx context.Context, w *worker) (watch func(), err error) {
	// The wait is registered before the start, so that no exit can slip between the two; it
	// lives as long as the container runs, not as long as ctx.
	waitCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	wait := p.containerWait(waitCtx, w.container, container.WaitConditionNextExit)
	select {
	case err := <-wait.Error: // not acknowledged: the start would go unwatched
		cancel()
		return nil, fmt.Errorf("starting its container: %w", err)
	default: // the wait's errors are the watch's from here on
	}
	if _, err := engineCall(ctx, p, kindChange, "ContainerStart", func(ctx context.Context) (client.ContainerStartResult, error) {
		return p.api.ContainerStart(ctx, w.container, client.ContainerStartOptions{})
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("starting its container: %w", err)
	}
	done := make(chan struct{})
	w.mu.Lock()
	w.watched = done
	w.mu.Unlock()
	return func() { go p.watch(w, waitCtx, cancel, wait, done) }, nil
}

// watch waits for the worker's container to stop. A stop that Suspend asked for (SuspendStop)
// keeps the worker, suspended; any other ends it: see finish.
func (p *Pool) watch(w *worker, ctx context.Context, cancel context.CancelFunc, wait client.ContainerWaitResult, done chan struct{}) {
	defer close(done)
	defer cancel()
	code, cause := p.await(ctx, w, wait)
	w.mu.Lock()
	if w.phase == suspending && !w.stopping {
		w.phase = suspended
		w.emit(pool.WorkerSuspended, nil, false)
		w.mu.Unlock()
		w.events.Flush()
		return
	}
	w.phase = exited
	stopped := w.stopping
	w.mu.Unlock()
	p.finish(w, code, cause, stopped)
}

// lostEngineAfter is how long watch keeps asking an engine that does not answer about a
// container before it gives the worker up as exited.
const lostEngineAfter = 2 * time.Minute

// await returns the exit status of the worker's container once it has stopped, or why it is
// gone when no status can be had. When the wait breaks (the engine restarted, a connection
// dropped) it asks the engine and waits again while the container runs.
func (p *Pool) await(ctx context.Context, w *worker, wait client.ContainerWaitResult) (int64, error) {
	var lostSince time.Time
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		var waitErr error
		select {
		case res := <-wait.Result:
			if res.Error != nil && res.Error.Message != "" {
				return res.StatusCode, fmt.Errorf("the engine could not wait for its container: %s", res.Error.Message)
			}
			return res.StatusCode, nil
		case waitErr = <-wait.Error:
		}
		info, err := p.inspect(ctx, w.container)
		switch {
		case cerrdefs.IsNotFound(err):
			return -1, fmt.Errorf("its container %s is gone (removed outside Gantry?)", w.name)
		case err == nil && info.Container.State != nil && !info.Container.State.Running:
			return int64(info.Container.State.ExitCode), nil
		case err == nil:
			lostSince = time.Time{}
		case lostSince.IsZero():
			lostSince = time.Now()
		case time.Since(lostSince) > lostEngineAfter:
			return -1, fmt.Errorf("lost the Docker engine while watching its container (%v; then %v)", waitErr, err)
		}
		time.Sleep(backoff)
		wait = p.containerWait(ctx, w.container, container.WaitConditionNotRunning)
	}
}

// finish ends a worker whose container has stopped for good: it says why it exited (unless it
// was stopped or exited with status 0), saves its log, removes its container, frees its
// devices, then reports WorkerExited.
func (p *Pool) finish(w *worker, code int64, cause error, stopped bool) {
	ctx := context.Background() // each engine call has its deadline
	var err error
	if !stopped && (code != 0 || cause != nil) {
		err = p.exitError(ctx, w, code, cause)
	}
	p.saveLog(ctx, w)
	p.remove(w)
	p.release(w)
	w.mu.Lock()
	w.emit(pool.WorkerExited, err, stopped)
	w.mu.Unlock()
	w.events.Flush()
}

// exitError is the error of a worker that exited by itself: its status (an *ExitError) or
// cause, with the last lines it wrote and where its log is.
func (p *Pool) exitError(ctx context.Context, w *worker, code int64, cause error) error {
	exit := cause
	if cause == nil {
		e := &ExitError{Code: int(code)}
		if info, err := p.inspect(ctx, w.container); err == nil && info.Container.State != nil {
			e.OOMKilled = info.Container.State.OOMKilled
		}
		exit = e
	}
	hint := "no output"
	if last := p.lastLines(ctx, w, 5); last != "" {
		hint = "last lines: " + strconv.Quote(last)
	}
	if path := p.logPath(w.id); path != "" {
		hint += "; log: " + path
	} else {
		hint += "; its log is removed with its container (give the pool a log directory to keep it)"
	}
	return fmt.Errorf("worker %s exited: %w (%s)", w.id, exit, hint)
}

// inspect asks the engine about a container.
func (p *Pool) inspect(ctx context.Context, ctr string) (client.ContainerInspectResult, error) {
	return engineCall(ctx, p, kindInspect, "ContainerInspect", func(ctx context.Context) (client.ContainerInspectResult, error) {
		return p.api.ContainerInspect(ctx, ctr, client.ContainerInspectOptions{})
	})
}

// removeContainer removes a container by force, whatever its state.
func (p *Pool) removeContainer(ctx context.Context, ctr string) error {
	_, err := engineCall(ctx, p, kindChange, "ContainerRemove", func(ctx context.Context) (client.ContainerRemoveResult, error) {
		return p.api.ContainerRemove(ctx, ctr, client.ContainerRemoveOptions{Force: true})
	})
	return err
}

// stopContainer stops a container: its stop signal, then SIGKILL after the pool's grace.
func (p *Pool) stopContainer(ctx context.Context, ctr string) error {
	secs := p.graceSeconds()
	_, err := engineCall(ctx, p, kindStop, "ContainerStop", func(ctx context.Context) (client.ContainerStopResult, error) {
		return p.api.ContainerStop(ctx, ctr, client.ContainerStopOptions{Timeout: &secs})
	})
	return err
}

// remove removes the worker's container, whatever its state.
func (p *Pool) remove(w *worker) {
	err := p.removeContainer(context.Background(), w.container)
	if err != nil && !cerrdefs.IsNotFound(err) {
		p.log.Error("removing a worker's container", "pool", p.desc.ID, "worker", w.id, "container", w.name, "err", err)
	}
}

// Stop stops the worker's container (the stop signal, then SIGKILL after the grace; a paused
// one is thawed by the engine first) and removes it once it has exited; a container kept by
// SuspendStop is removed at once. It returns at once: the WorkerExited event says when the
// worker is gone. Stopping an unknown, exited or stopping worker does nothing.
func (p *Pool) Stop(_ context.Context, id string) error {
	w, err := p.lookup("stopping", id)
	if err != nil {
		return nil // exited or unknown: nothing to stop
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.phase == exited || w.stopping {
		return nil
	}
	w.stopping = true
	go p.halt(w)
	return nil
}

// halt stops a worker for Stop, once no other call is changing its container.
func (p *Pool) halt(w *worker) {
	w.op.Lock()
	defer w.op.Unlock()
	w.mu.Lock()
	ph := w.phase
	kept := ph == suspended && p.suspend == SuspendStop
	if kept {
		w.phase = exited
	}
	w.mu.Unlock()
	switch {
	case ph == exited: // refused by Start, or exited meanwhile
	case kept: // no watch: the container is stopped already
		p.finish(w, 0, nil, true)
	default: // running or paused: the watch reports the exit
		if err := p.stopContainer(context.Background(), w.container); err != nil && !cerrdefs.IsNotFound(err) {
			p.log.Error("stopping a worker's container; removing it by force", "pool", p.desc.ID, "worker", w.id, "container", w.name, "err", err)
			p.remove(w)
		}
	}
}

// Shutdown stops every worker of the pool as Stop does and waits until they have exited and
// their containers are removed, or ctx ends; then it closes the pool's idle connections.
// Gantry calls it as it stops: unlike processes, containers do not die with the server, and
// the stops Stop starts in the background must not be cut short by its exit.
func (p *Pool) Shutdown(ctx context.Context) error {
	workers := p.live.All()
	for _, w := range workers {
		_ = p.Stop(ctx, w.id)
	}
	defer func() { _ = p.api.Close() }()
	for _, w := range workers {
		select {
		case <-w.gone:
		case <-ctx.Done():
			return fmt.Errorf("docker pool %s: workers still stopping: %w", p.desc.ID, ctx.Err())
		}
	}
	return nil
}

// graceSeconds is the grace in the Engine API's unit, whole seconds, rounded up.
func (p *Pool) graceSeconds() int {
	return int(math.Ceil(p.grace.Seconds()))
}

// Suspend pauses the worker's container (SuspendPause) or stops it and keeps it
// (SuspendStop), and reports WorkerSuspended. Suspending a suspended worker does nothing.
func (p *Pool) Suspend(ctx context.Context, id string) error {
	w, err := p.lookup("suspending", id)
	if err != nil {
		return err
	}
	w.op.Lock()
	defer w.op.Unlock()
	w.mu.Lock()
	if err := w.unready("suspending"); err != nil || w.phase == suspended {
		w.mu.Unlock()
		return err
	}
	if p.suspend == SuspendPause {
		w.mu.Unlock()
		if _, err := engineCall(ctx, p, kindChange, "ContainerPause", func(ctx context.Context) (client.ContainerPauseResult, error) {
			return p.api.ContainerPause(ctx, w.container, client.ContainerPauseOptions{})
		}); err != nil {
			return fmt.Errorf("suspending worker %s: pausing its container: %w", id, err)
		}
		return w.become(suspended, pool.WorkerSuspended, "suspending")
	}
	w.phase = suspending // the watch sees the exit and keeps the worker
	done := w.watched
	w.mu.Unlock()
	if err := p.stopContainer(ctx, w.container); err != nil {
		w.mu.Lock()
		if w.phase == suspending {
			w.phase = running
		}
		w.mu.Unlock()
		return fmt.Errorf("suspending worker %s: stopping its container: %w", id, err)
	}
	<-done // the container has stopped: its watch ends at once
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.phase != suspended {
		return fmt.Errorf("suspending worker %s: it was stopped meanwhile", id)
	}
	return nil
}

// Resume unpauses the worker's container (SuspendPause) or starts the kept container again
// (SuspendStop), and reports WorkerResumed. Resuming a worker that is not suspended does
// nothing.
func (p *Pool) Resume(ctx context.Context, id string) error {
	w, err := p.lookup("resuming", id)
	if err != nil {
		return err
	}
	w.op.Lock()
	defer w.op.Unlock()
	w.mu.Lock()
	if err := w.unready("resuming"); err != nil || w.phase != suspended {
		w.mu.Unlock()
		return err
	}
	w.mu.Unlock()
	if p.suspend == SuspendPause {
		if _, err := engineCall(ctx, p, kindChange, "ContainerUnpause", func(ctx context.Context) (client.ContainerUnpauseResult, error) {
			return p.api.ContainerUnpause(ctx, w.container, client.ContainerUnpauseOptions{})
		}); err != nil {
			return fmt.Errorf("resuming worker %s: unpausing its container: %w", id, err)
		}
		return w.become(running, pool.WorkerResumed, "resuming")
	}
	watch, err := p.run(ctx, w)
	if err != nil {
		return fmt.Errorf("resuming worker %s: %w", id, err)
	}
	w.mu.Lock()
	w.phase = running
	w.emit(pool.WorkerResumed, nil, false)
	w.mu.Unlock()
	watch()
	w.events.Flush()
	return nil
}

// unready says why op cannot act on the worker now, nil when it can; w.mu is held.
func (w *worker) unready(op string) error {
	switch {
	case w.phase == exited:
		return fmt.Errorf("%s worker %s: it has exited", op, w.id)
	case w.stopping:
		return fmt.Errorf("%s worker %s: it is being stopped", op, w.id)
	}
	return nil
}

// become moves a worker that was paused or unpaused to ph and reports state, unless its
// container exited meanwhile (its watch reported that).
func (w *worker) become(ph phase, state pool.WorkerState, op string) error {
	w.mu.Lock()
	if w.phase == exited {
		w.mu.Unlock()
		return fmt.Errorf("%s worker %s: it exited meanwhile", op, w.id)
	}
	w.phase = ph
	w.emit(state, nil, false)
	w.mu.Unlock()
	w.events.Flush()
	return nil
}

// reserve registers a starting worker and holds its devices, or says why it cannot.
func (p *Pool) reserve(w *worker) error { return p.live.Add(w.id, w.gpus, w) }

// release frees a worker's devices and forgets it; it is called once for each worker reserve
// registered.
func (p *Pool) release(w *worker) {
	p.live.Remove(w.id, w.gpus)
	close(w.gone)
}

// lookup returns a live worker, or an error for op naming the id.
func (p *Pool) lookup(op, id string) (*worker, error) {
	if w, ok := p.live.Get(id); ok {
		return w, nil
	}
	return nil, fmt.Errorf("%s worker %s: the docker pool %s has no such worker (it exited, or never started)", op, id, p.desc.ID)
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
