package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// fakePool is an in-memory pool for the scheduler's own tests: workers "run" until stopped,
// or crash at once when crash is set. The real adapters pass adapters/adaptertest.
type fakePool struct {
	info core.PoolInfo

	mu        sync.Mutex
	alive     map[string]pool.WorkerSpec
	suspended map[string]bool
	started   []pool.WorkerSpec
	resumes   int
	crash     error    // a started worker exits at once with this
	killed    []string // workers Kill was called for (lost_test.go)
	slowKill  bool     // Kill records the call only: the worker exits when the test says
	noSuspend bool
	refuse    error  // Start refuses every worker with this
	tries     int    // Start calls, refused ones included
	panicIn   string // "Start", "Suspend" or "Stop": that call panics (adaptercall_test.go)
	// startGate, when set, holds each Start until it is closed; each Start sends its worker's
	// id on startIn first (a slow adapter: a container pulling its image).
	startGate chan struct{}
	startIn   chan string
	// http, when set, serves each LOAD_BALANCER worker (a spec with PortEnv): its addresses
	// are a test server's.
	http func(id string) http.Handler
	srvs map[string]*httptest.Server
}

func (p *fakePool) Describe() core.PoolInfo { return p.info }

func (p *fakePool) Start(_ context.Context, spec pool.WorkerSpec) error {
	if p.startGate != nil {
		p.startIn <- spec.ID
		<-p.startGate
	}
	p.mu.Lock()
	p.tries++
	if p.refuse != nil {
		defer p.mu.Unlock()
		return p.refuse
	}
	if p.alive == nil {
		p.alive, p.suspended = map[string]pool.WorkerSpec{}, map[string]bool{}
	}
	p.alive[spec.ID] = spec
	p.started = append(p.started, spec)
	crash := p.crash
	if crash != nil {
		delete(p.alive, spec.ID)
	}
	p.mu.Unlock()
	p.maybePanic("Start") // after the worker started, as a buggy adapter might
	var addrs map[int]string
	if len(spec.PortEnv) > 0 && p.http != nil {
		srv := httptest.NewServer(p.http(spec.ID))
		p.mu.Lock()
		if p.srvs == nil {
			p.srvs = map[string]*httptest.Server{}
		}
		p.srvs[spec.ID] = srv
		p.mu.Unlock()
		addrs = map[int]string{}
		for _, port := range spec.PortEnv {
			addrs[port] = srv.Listener.Addr().String()
		}
	}
	spec.Report(pool.WorkerEvent{Worker: spec.ID, State: pool.WorkerRunning, At: time.Now(), Addrs: addrs})
	if crash != nil {
		spec.Report(pool.WorkerEvent{Worker: spec.ID, State: pool.WorkerExited, At: time.Now(), Err: crash})
	}
	return nil
}

func (p *fakePool) Stop(_ context.Context, id string) error {
	p.maybePanic("Stop")
	p.mu.Lock()
	spec, ok := p.alive[id]
	delete(p.alive, id)
	delete(p.suspended, id)
	srv := p.srvs[id]
	delete(p.srvs, id)
	p.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	if ok {
		spec.Report(pool.WorkerEvent{Worker: id, State: pool.WorkerExited, At: time.Now(), Stopped: true})
	}
	return nil
}

func (p *fakePool) Suspend(_ context.Context, id string) error {
	p.maybePanic("Suspend")
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.noSuspend {
		return pool.ErrUnsupported
	}
	if _, ok := p.alive[id]; !ok {
		return fmt.Errorf("no worker %s", id)
	}
	p.suspended[id] = true
	return nil
}

func (p *fakePool) Resume(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.suspended[id] {
		return errors.New("not suspended")
	}
	delete(p.suspended, id)
	p.resumes++
	return nil
}

// maybePanic panics when the call is panicIn.
func (p *fakePool) maybePanic(call string) {
	p.mu.Lock()
	in := p.panicIn
	p.mu.Unlock()
	if in == call {
		panic("boom in " + call)
	}
}

// running returns the ids of the workers alive and not suspended.
func (p *fakePool) running() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for id := range p.alive {
		if !p.suspended[id] {
			ids = append(ids, id)
		}
	}
	return ids
}

func (p *fakePool) counts() (alive, suspended, started int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.alive), len(p.suspended), len(p.started)
}

// startCalls is how many times Start was called.
func (p *fakePool) startCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tries
}

var _ pool.Pool = (*fakePool)(nil)
