package docker

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// Timeouts bound the pool's calls to the Docker engine. An engine that stops answering (a
// wedged dockerd, seen under load with Engine 20.10) would otherwise hold the goroutine of
// every call made to it, the scheduler's among them; with a deadline the call fails with an
// *EngineTimeoutError naming it. A zero field takes its default. The wait for a container's
// exit has no deadline: it lasts as long as the worker runs (when it breaks, the pool asks
// the engine with an Inspect deadline, and gives the worker up after lostEngineAfter).
type Timeouts struct {
	// Pull bounds an image pull, from the request to the end of its progress stream:
	// DefaultPullTimeout.
	Pull time.Duration `yaml:"pull"`
	// Inspect bounds a look at the engine: ping, image and container inspect, container
	// list, and the engine's acknowledgement of a wait for a container's exit:
	// DefaultInspectTimeout.
	Inspect time.Duration `yaml:"inspect"`
	// Change bounds a change to a container: create, start, pause, unpause, remove:
	// DefaultChangeTimeout.
	Change time.Duration `yaml:"change"`
	// Stop bounds a container's stop beyond its stop grace (the engine waits out the grace
	// before it kills): DefaultStopTimeout.
	Stop time.Duration `yaml:"stop"`
	// Logs bounds reading a container's log: to the engine's answer when a user reads it
	// (the reading then lasts as long as the user's request), to the end when the pool saves
	// it or quotes its last lines: DefaultLogsTimeout.
	Logs time.Duration `yaml:"logs"`
}

// Default engine call deadlines (see Timeouts). A pull fetches gigabytes for a GPU image; the
// other calls take milliseconds on an engine that answers, seconds on a loaded one.
const (
	DefaultPullTimeout    = 30 * time.Minute
	DefaultInspectTimeout = 30 * time.Second
	DefaultChangeTimeout  = time.Minute
	DefaultStopTimeout    = 30 * time.Second
	DefaultLogsTimeout    = time.Minute
)

// withDefaults returns t with each zero field set to its default.
func (t Timeouts) withDefaults() Timeouts {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&t.Pull, DefaultPullTimeout)
	def(&t.Inspect, DefaultInspectTimeout)
	def(&t.Change, DefaultChangeTimeout)
	def(&t.Stop, DefaultStopTimeout)
	def(&t.Logs, DefaultLogsTimeout)
	return t
}

// negative returns the key and value of t's first negative deadline; "" when none is.
func (t Timeouts) negative() (key string, d time.Duration) {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"pull", t.Pull}, {"inspect", t.Inspect}, {"change", t.Change}, {"stop", t.Stop}, {"logs", t.Logs}} {
		if f.d < 0 {
			return "timeouts." + f.name, f.d
		}
	}
	return "", 0
}

// check says what is wrong with t: a negative deadline.
func (t Timeouts) check() error {
	if key, d := t.negative(); key != "" {
		return fmt.Errorf("%s %s is negative", key, d)
	}
	return nil
}

// callKind is a kind of engine call, by the Timeouts field that bounds it.
type callKind int

const (
	kindPull callKind = iota
	kindInspect
	kindChange
	kindStop
	kindLogs
)

// setting is the kind's key in the pool's configuration (docker.timeouts.<key>).
func (k callKind) setting() string {
	return [...]string{"pull", "inspect", "change", "stop", "logs"}[k]
}

// of returns the deadline of a kind of call.
func (t Timeouts) of(k callKind) time.Duration {
	return [...]time.Duration{t.Pull, t.Inspect, t.Change, t.Stop, t.Logs}[k]
}

// EngineTimeoutError is an engine call that did not end within its deadline. It unwraps to
// context.DeadlineExceeded.
type EngineTimeoutError struct {
	Call    string        // the Engine API call, e.g. "ContainerStart"
	After   time.Duration // its deadline
	Setting string        // the Timeouts field that sets it: "pull", "inspect", ...
}

func (e *EngineTimeoutError) Error() string {
	return fmt.Sprintf("the Docker engine did not answer %s within %s (is dockerd wedged? if it is only slow, raise the pool's docker.timeouts.%s)",
		e.Call, e.After, e.Setting)
}

// Unwrap returns context.DeadlineExceeded.
func (e *EngineTimeoutError) Unwrap() error { return context.DeadlineExceeded }

// bound returns ctx limited to the deadline of a kind of call, and the function that turns the
// call's error into an *EngineTimeoutError when that deadline (not ctx's own end) ended it.
func (p *Pool) bound(ctx context.Context, k callKind, call string) (context.Context, context.CancelFunc, func(error) error) {
	d := p.timeouts.of(k)
	if k == kindStop {
		d += p.grace // the engine waits out the grace before it kills
	}
	te := &EngineTimeoutError{Call: call, After: d, Setting: k.setting()}
	ctx, cancel := context.WithTimeoutCause(ctx, d, te)
	return ctx, cancel, func(err error) error {
		if err != nil && context.Cause(ctx) == te {
			return te
		}
		return err
	}
}

// engineCall runs one engine call, fn, under the deadline of its kind.
func engineCall[T any](ctx context.Context, p *Pool, k callKind, call string, fn func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel, timedOut := p.bound(ctx, k, call)
	defer cancel()
	v, err := fn(ctx)
	return v, timedOut(err)
}

// openStream runs an engine call that answers a stream (a container's log): the Logs deadline
// bounds the engine's answer, and the stream then lasts as long as ctx.
func (p *Pool) openStream(ctx context.Context, call string, fn func(ctx context.Context) (io.ReadCloser, error)) (io.ReadCloser, error) {
	d := p.timeouts.Logs
	te := &EngineTimeoutError{Call: call, After: d, Setting: kindLogs.setting()}
	ctx, cancel := context.WithCancelCause(ctx)
	timer := time.AfterFunc(d, func() { cancel(te) })
	rc, err := fn(ctx)
	if !timer.Stop() { // the deadline came first
		if rc != nil {
			_ = rc.Close()
		}
		cancel(nil)
		return nil, te
	}
	if err != nil {
		cancel(nil)
		return nil, err
	}
	return &cancelOnClose{ReadCloser: rc, cancel: func() { cancel(nil) }}, nil
}

// containerWait registers a wait for a container's condition; the wait lives as long as ctx.
// The engine acknowledges a wait at once (the header of its answer) and answers when the
// condition is met, and the client's call returns on the acknowledgement: the Inspect
// deadline bounds that. An engine that does not acknowledge in time ends the wait with an
// *EngineTimeoutError on its Error channel.
func (p *Pool) containerWait(ctx context.Context, ctr string, cond container.WaitCondition) client.ContainerWaitResult {
	d := p.timeouts.Inspect
	te := &EngineTimeoutError{Call: "ContainerWait", After: d, Setting: kindInspect.setting()}
	wctx, cancel := context.WithCancelCause(ctx)
	context.AfterFunc(ctx, func() { cancel(nil) }) // the wait ends with ctx
	timer := time.AfterFunc(d, func() { cancel(te) })
	wait := p.api.ContainerWait(wctx, ctr, client.ContainerWaitOptions{Condition: cond})
	if !timer.Stop() { // the deadline came first: the wait's error may be a bare cancel
		errc := make(chan error, 1)
		errc <- te
		return client.ContainerWaitResult{Result: make(chan container.WaitResponse), Error: errc}
	}
	return wait
}

// cancelOnClose is a stream whose Close also ends its context.
type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
