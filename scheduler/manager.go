package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/gantryhq/gantry/core"
)

// Worker is a started worker as its adapter sees it.
type Worker interface {
	Wait() error // returns when the worker has exited
	Stop()       // asks the worker to exit, then forces it
}

// Launcher starts workers: implemented by the pool adapters.
type Launcher interface {
	Launch(spec WorkerSpec) (Worker, error)
}

// EndpointSource is what the manager reads endpoints from.
type EndpointSource interface {
	GetEndpoint(ctx context.Context, id string) (core.Endpoint, error)
	ScanEndpoints(ctx context.Context, fn func(core.Endpoint) error) error
}

// PingInterval is the heartbeat period handed to workers; well inside core.WorkerLostAfter.
const PingInterval = 10 * time.Second

// Manager keeps each endpoint's workers running: at least workers.min, and one as soon as a
// job is queued for an endpoint that has none (up to workers.max). The autoscaler replaces this
// policy.
type Manager struct {
	Jobs      *core.Jobs
	Endpoints EndpointSource
	Launcher  Launcher
	// BaseURL is where workers reach Gantry, e.g. "http://127.0.0.1:8080".
	BaseURL string
	// GPU names the pool's GPU type in the worker URLs (`?gpu=`).
	GPU string
	Log *slog.Logger

	pending sync.Map // endpoint -> true while a Demand lookup runs
	quiet   sync.Map // endpoint -> time.Time until which Demand does nothing

	mu      sync.Mutex
	running map[string]map[string]Worker // endpoint -> worker id -> worker
	wg      sync.WaitGroup
	closed  bool
}

func (m *Manager) count(endpoint string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.running[endpoint])
}

// demandCooldown is how long Demand stays quiet for an endpoint after a demand that started
// nothing (workers.max 0, or a launch that failed); the reconcile loop covers that endpoint
// meanwhile.
const demandCooldown = time.Second

// Demand starts a worker for the endpoint if it has none: the first job must not wait for a
// reconcile tick. It is called for every enqueued job, so it costs almost nothing when there
// is nothing to do: at most one lookup per endpoint is in flight, and none during a cooldown.
func (m *Manager) Demand(endpoint string) {
	if m.count(endpoint) > 0 {
		return
	}
	quiet := func() bool {
		until, ok := m.quiet.Load(endpoint)
		return ok && time.Now().Before(until.(time.Time))
	}
	if quiet() {
		return
	}
	if _, busy := m.pending.LoadOrStore(endpoint, true); busy {
		return
	}
	if quiet() { // a lookup that just finished may have started the cooldown
		m.pending.Delete(endpoint)
		return
	}
	go func() {
		defer m.pending.Delete(endpoint)
		ep, err := m.Endpoints.GetEndpoint(context.Background(), endpoint)
		if err == nil {
			m.ensure(ep, 1)
		}
		if m.count(endpoint) == 0 {
			m.quiet.Store(endpoint, time.Now().Add(demandCooldown))
		}
	}()
}

// ensure starts workers until the endpoint has want (bounded by workers.max).
func (m *Manager) ensure(ep core.Endpoint, want int) {
	want = min(want, ep.Workers.Max)
	for {
		m.mu.Lock()
		if m.closed || len(m.running[ep.ID]) >= want {
			m.mu.Unlock()
			return
		}
		id := ep.ID + "-" + core.NewID(8)
		token := m.Jobs.RegisterWorker(ep.ID, id)
		spec := WorkerSpec{ID: id, Endpoint: ep.ID, Image: ep.Image, Args: ep.Args, Env: m.env(ep, id, token)}
		w, err := m.Launcher.Launch(spec)
		if err != nil {
			m.mu.Unlock()
			m.Jobs.ForgetWorker(id)
			m.Log.Error("starting a worker", "endpoint", ep.ID, "image", ep.Image, "err", err)
			return
		}
		if m.running == nil {
			m.running = map[string]map[string]Worker{}
		}
		if m.running[ep.ID] == nil {
			m.running[ep.ID] = map[string]Worker{}
		}
		m.running[ep.ID][id] = w
		m.wg.Add(1)
		m.mu.Unlock()
		m.Log.Info("worker started", "endpoint", ep.ID, "worker", id, "image", ep.Image)
		go m.watch(ep.ID, id, w)
	}
}

// watch waits for a worker to exit and forgets it; its jobs follow the worker-lost rule.
func (m *Manager) watch(endpoint, id string, w Worker) {
	defer m.wg.Done()
	err := w.Wait()
	m.mu.Lock()
	delete(m.running[endpoint], id)
	m.mu.Unlock()
	m.Jobs.ForgetWorker(id)
	m.Log.Info("worker exited", "endpoint", endpoint, "worker", id, "err", err)
}

// env is the worker-protocol environment (notes/runpod-compat.md) over the endpoint's env.
// Every URL already carries a query, as the RunPod SDK appends with a bare '&'.
func (m *Manager) env(ep core.Endpoint, id, token string) map[string]string {
	env := map[string]string{}
	for k, v := range ep.Env {
		env[k] = v
	}
	q := "?gpu=" + m.GPU
	base := m.BaseURL + "/v2/" + ep.ID
	for k, v := range map[string]string{
		"RUNPOD_WEBHOOK_GET_JOB":         base + "/job-take/" + id + q,
		"RUNPOD_WEBHOOK_POST_OUTPUT":     base + "/job-done/" + id + "/$ID" + q,
		"RUNPOD_WEBHOOK_POST_STREAM":     base + "/job-stream/" + id + "/$ID" + q,
		"RUNPOD_WEBHOOK_PING":            base + "/ping/" + id + q,
		"RUNPOD_POD_ID":                  id,
		"RUNPOD_AI_API_KEY":              token,
		"RUNPOD_ENDPOINT_ID":             ep.ID,
		"RUNPOD_PING_INTERVAL":           strconv.FormatInt(PingInterval.Milliseconds(), 10),
		"RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true",
		"RUNPOD_SKIP_GPU_CHECK":          "true",
	} {
		env[k] = v
	}
	return env
}

// Reconcile brings every endpoint to its minimum and stops the workers of deleted endpoints.
func (m *Manager) Reconcile(ctx context.Context) error {
	seen := map[string]bool{}
	err := m.Endpoints.ScanEndpoints(ctx, func(ep core.Endpoint) error {
		seen[ep.ID] = true
		if ep.Type == core.TypeQueue {
			want := ep.Workers.Min
			if m.Jobs.Health(ep.ID).InQueue > 0 {
				want = max(want, 1)
			}
			m.ensure(ep, want)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing endpoints: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for ep, ws := range m.running {
		for id, w := range ws {
			switch {
			case !seen[ep]:
				w.Stop() // the endpoint was deleted
			case m.Jobs.WorkerStopPod(id):
				m.Log.Info("recycling worker: its last job asked for stopPod", "endpoint", ep, "worker", id)
				w.Stop() // it exits, is forgotten, and demand or workers.min starts a fresh one
			}
		}
	}
	return nil
}

// Run reconciles every interval until ctx ends, then stops every worker and waits for them.
func (m *Manager) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := m.Reconcile(ctx); err != nil && ctx.Err() == nil {
			m.Log.Error("reconciling workers", "err", err)
		}
		select {
		case <-ctx.Done():
			m.stopAll()
			return
		case <-t.C:
		}
	}
}

func (m *Manager) stopAll() {
	m.mu.Lock()
	m.closed = true
	for _, ws := range m.running {
		for _, w := range ws {
			w.Stop()
		}
	}
	m.mu.Unlock()
	m.wg.Wait()
}
