package scheduler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// fakeLauncher records specs and hands back workers the test can end.
type fakeLauncher struct {
	mu      sync.Mutex
	specs   []WorkerSpec
	workers []*fakeWorker
	fail    error
}

type fakeWorker struct {
	exit    chan struct{}
	stopped chan struct{}
	once    sync.Once
}

func (w *fakeWorker) Wait() error { <-w.exit; return nil }
func (w *fakeWorker) Stop() {
	w.once.Do(func() { close(w.stopped); close(w.exit) })
}

func (l *fakeLauncher) Launch(spec WorkerSpec) (Worker, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return nil, l.fail
	}
	w := &fakeWorker{exit: make(chan struct{}), stopped: make(chan struct{})}
	l.specs = append(l.specs, spec)
	l.workers = append(l.workers, w)
	return w, nil
}

func (l *fakeLauncher) count() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.specs) }

type endpoints map[string]core.Endpoint

var lookupCount sync.Map // endpoint id -> *atomic.Int64

func (e endpoints) lookups(id string) int64 {
	v, _ := lookupCount.LoadOrStore(id, new(atomic.Int64))
	return v.(*atomic.Int64).Load()
}

func (e endpoints) GetEndpoint(_ context.Context, id string) (core.Endpoint, error) {
	v, _ := lookupCount.LoadOrStore(id, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	ep, ok := e[id]
	if !ok {
		return core.Endpoint{}, core.ErrNotFound
	}
	return ep, nil
}

func (e endpoints) ScanEndpoints(_ context.Context, fn func(core.Endpoint) error) error {
	for _, ep := range e {
		if err := fn(ep); err != nil {
			return err
		}
	}
	return nil
}

func newManager(eps endpoints, l *fakeLauncher) *Manager {
	return &Manager{
		Jobs:      core.NewJobs(core.JobsConfig{Dispatch: &Queues{}, Clock: core.SystemClock{}}),
		Endpoints: eps, Launcher: l, BaseURL: "http://127.0.0.1:9", GPU: "CPU",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func TestManagerStartsMinimumWithProtocolEnv(t *testing.T) {
	t.Parallel()
	eps := endpoints{"ep1": {ID: "ep1", Type: core.TypeQueue, Container: core.Container{Image: "gantry/echo", Args: "--x",
		Env: map[string]string{"MODEL": "m", "RUNPOD_POD_ID": "overridden"}}, Workers: core.Workers{Min: 2, Max: 3}}}
	l := &fakeLauncher{}
	m := newManager(eps, l)
	if err := m.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.count() != 2 {
		t.Fatalf("started %d workers; want workers.min = 2", l.count())
	}
	s := l.specs[0]
	if s.Image != "gantry/echo" || s.Args != "--x" || s.Env["MODEL"] != "m" {
		t.Errorf("spec = %+v", s)
	}
	want := map[string]string{
		"RUNPOD_WEBHOOK_GET_JOB":     "http://127.0.0.1:9/v2/ep1/job-take/" + s.ID + "?gpu=CPU",
		"RUNPOD_WEBHOOK_POST_OUTPUT": "http://127.0.0.1:9/v2/ep1/job-done/" + s.ID + "/$ID?gpu=CPU",
		"RUNPOD_WEBHOOK_POST_STREAM": "http://127.0.0.1:9/v2/ep1/job-stream/" + s.ID + "/$ID?gpu=CPU",
		"RUNPOD_WEBHOOK_PING":        "http://127.0.0.1:9/v2/ep1/ping/" + s.ID + "?gpu=CPU",
		"RUNPOD_POD_ID":              s.ID,
		"RUNPOD_ENDPOINT_ID":         "ep1",
		"RUNPOD_PING_INTERVAL":       "10000",
	}
	for k, v := range want {
		if s.Env[k] != v {
			t.Errorf("%s = %q; want %q", k, s.Env[k], v)
		}
	}
	if !strings.HasPrefix(s.Env["RUNPOD_AI_API_KEY"], "gw_") {
		t.Errorf("token = %q", s.Env["RUNPOD_AI_API_KEY"])
	}
	if err := m.Jobs.AuthWorker(s.Env["RUNPOD_AI_API_KEY"], "ep1", s.ID); err != nil {
		t.Errorf("the handed-out token does not authenticate its worker: %v", err)
	}
	// Reconciling again starts nothing more.
	_ = m.Reconcile(context.Background())
	if l.count() != 2 {
		t.Errorf("second reconcile: %d workers; want 2", l.count())
	}
}

func TestManagerDemandAndExit(t *testing.T) {
	t.Parallel()
	ep0 := "ep0-" + core.NewID(8) // the lookup counter is per endpoint id
	eps := endpoints{"ep1": {ID: "ep1", Type: core.TypeQueue, Container: core.Container{Image: "i"}, Workers: core.Workers{Min: 0, Max: 1}},
		ep0: {ID: ep0, Type: core.TypeQueue, Container: core.Container{Image: "i"}, Workers: core.Workers{Min: 0, Max: 0}}}
	l := &fakeLauncher{}
	m := newManager(eps, l)
	for range 1000 {
		m.Demand(ep0) // max 0: never started, and looked up at most once
	}
	m.Demand("ep1")
	deadline := time.Now().Add(5 * time.Second)
	for l.count() < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if l.count() != 1 || l.specs[0].Endpoint != "ep1" {
		t.Fatalf("after demand: %d workers %v; want one for ep1", l.count(), l.specs)
	}
	if n := eps.lookups(ep0); n > 1 {
		t.Errorf("1000 demands for an endpoint with workers.max 0 looked it up %d times; want at most 1", n)
	}
	// The worker exits: the next demand starts another.
	l.workers[0].Stop()
	for m.count("ep1") != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	m.Demand("ep1")
	for l.count() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if l.count() != 2 {
		t.Errorf("after the worker exited and a job came: %d launches; want 2", l.count())
	}
}

func TestManagerStopsDeletedEndpointsAndAll(t *testing.T) {
	t.Parallel()
	eps := endpoints{"ep1": {ID: "ep1", Type: core.TypeQueue, Container: core.Container{Image: "i"}, Workers: core.Workers{Min: 1, Max: 1}}}
	l := &fakeLauncher{}
	m := newManager(eps, l)
	_ = m.Reconcile(context.Background())
	delete(eps, "ep1")
	_ = m.Reconcile(context.Background())
	select {
	case <-l.workers[0].stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the deleted endpoint's worker was not stopped")
	}
	// A failing launch is logged and leaves no registered worker.
	l.fail = errors.New("no such image")
	eps["ep2"] = core.Endpoint{ID: "ep2", Type: core.TypeQueue, Container: core.Container{Image: "x"}, Workers: core.Workers{Min: 1, Max: 1}}
	_ = m.Reconcile(context.Background())
	if h := m.Jobs.Health("ep2"); h.Initializing+h.Idle != 0 {
		t.Errorf("a worker that failed to launch is counted: %+v", h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.Run(ctx, time.Hour) // stops every worker and returns
}

// memStore keeps jobs in a map: enough persistence for the manager's tests.
type memStore struct {
	mu   sync.Mutex
	jobs map[string]core.Job
	in   map[string][]byte
}

func (s *memStore) PutJob(j *core.Job, input []byte, _ bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.jobs[j.ID] = *j
	if input != nil {
		s.in[j.ID] = input
	}
	return nil
}
func (s *memStore) SyncJobs() error { return nil }
func (s *memStore) GetJob(id string) (*core.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return nil, core.ErrNotFound
	}
	return &j, nil
}
func (s *memStore) Input(id string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.in[id], nil
}
func (s *memStore) DeleteJob(id string) error      { return nil }
func (s *memStore) ScanJobs(func(*core.Job)) error { return nil }

// TestManagerRecyclesStopPod: a worker whose result asked for stopPod is stopped once its job
// has ended, and a fresh worker takes its place.
func TestManagerRecyclesStopPod(t *testing.T) {
	t.Parallel()
	ep := core.Endpoint{ID: "ep1", Type: core.TypeQueue, Container: core.Container{Image: "i"}, Workers: core.Workers{Min: 1, Max: 1}, TimeoutMs: 60000}
	l := &fakeLauncher{}
	m := newManager(endpoints{"ep1": ep}, l)
	m.Jobs = core.NewJobs(core.JobsConfig{Store: &memStore{jobs: map[string]core.Job{}, in: map[string][]byte{}},
		Dispatch: &Queues{}, Clock: core.SystemClock{}, Log: m.Log})
	_ = m.Reconcile(context.Background())
	worker := l.specs[0].ID
	j, err := m.Jobs.Submit(&ep, core.Submission{Input: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got := m.Jobs.Take(ctx, "ep1", worker, 1); len(got) != 1 {
		t.Fatalf("take = %v", got)
	}
	if err := m.Jobs.Done("ep1", worker, j.ID, core.Result{Output: []byte(`1`), StopPod: true}); err != nil {
		t.Fatal(err)
	}
	_ = m.Reconcile(context.Background())
	select {
	case <-l.workers[0].stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the stopPod worker was not stopped")
	}
	for deadline := time.Now().Add(5 * time.Second); l.count() < 2 && time.Now().Before(deadline); {
		_ = m.Reconcile(context.Background())
		time.Sleep(5 * time.Millisecond)
	}
	if l.count() != 2 {
		t.Errorf("%d launches; want a fresh worker after the recycled one", l.count())
	}
}
