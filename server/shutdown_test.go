package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/scheduler"
	"github.com/gantryhq/gantry/store/memq"
	"github.com/gantryhq/gantry/store/pebble"
)

// watchedStore is the Pebble store with a record of any job operation after it closed.
type watchedStore struct {
	*pebble.Store
	closed atomic.Bool
	late   atomic.Value // string: the first operation after close
}

func (w *watchedStore) use(op string) {
	if w.closed.Load() {
		w.late.CompareAndSwap(nil, op)
	}
}

func (w *watchedStore) close() error { w.closed.Store(true); return w.Store.Close() }

func (w *watchedStore) PutJob(j *core.Job, in []byte, durable bool) error {
	w.use("PutJob " + j.ID)
	return w.Store.PutJob(j, in, durable)
}
func (w *watchedStore) SyncJobs() error { w.use("SyncJobs"); return w.Store.SyncJobs() }
func (w *watchedStore) GetJob(id string) (*core.Job, error) {
	w.use("GetJob " + id)
	return w.Store.GetJob(id)
}
func (w *watchedStore) Input(id string) ([]byte, error) {
	w.use("Input " + id)
	return w.Store.Input(id)
}

// lateExitPool runs each worker in process: a goroutine that takes jobs from the engine and runs
// them (an input {"ms": N} sleeps N ms, cut short when the worker stops, posting nothing then,
// as the echo worker does). Stop ends the worker, and its exit is reported a little later from
// another goroutine, as the process pool's wait goroutine does. Any report after the store
// closed is recorded.
type lateExitPool struct {
	jobs  *core.Jobs
	store *watchedStore
	mu    sync.Mutex
	stops map[string]context.CancelFunc
	late  atomic.Value   // string: the first report after the store closed
	alive sync.WaitGroup // worker goroutines, each until its exit is reported
}

func (p *lateExitPool) Describe() core.PoolInfo {
	return core.PoolInfo{ID: "local", GPUType: "CPU", GPUs: 8, CPU: true, DataCenter: "LOCAL"}
}

func (p *lateExitPool) Start(_ context.Context, spec pool.WorkerSpec) error {
	ctx, stop := context.WithCancel(context.Background())
	p.mu.Lock()
	p.stops[spec.ID] = stop
	p.mu.Unlock()
	report := func(ev pool.WorkerEvent) {
		if p.store.closed.Load() {
			p.late.CompareAndSwap(nil, fmt.Sprintf("worker %s: event %v", spec.ID, ev.State))
		}
		spec.Report(ev)
	}
	report(pool.WorkerEvent{Worker: spec.ID, State: pool.WorkerRunning, At: time.Now()})
	p.alive.Add(1)
	go func() {
		defer p.alive.Done()
		for ctx.Err() == nil {
			for _, tk := range p.jobs.Take(ctx, spec.Endpoint, spec.ID, 1) {
				var in struct{ MS int }
				_ = json.Unmarshal(tk.Input, &in)
				select {
				case <-ctx.Done():
					continue // stopped: nothing posted
				case <-time.After(time.Duration(in.MS) * time.Millisecond):
				}
				_ = p.jobs.Done(ctx, spec.Endpoint, spec.ID, tk.ID, core.Result{Output: json.RawMessage(`"ok"`)})
			}
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // the exit is noticed a little later
		report(pool.WorkerEvent{Worker: spec.ID, State: pool.WorkerExited, At: time.Now(), Stopped: true})
	}()
	return nil
}

func (p *lateExitPool) Stop(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if stop := p.stops[id]; stop != nil {
		stop()
	}
	return nil
}

func (p *lateExitPool) Suspend(context.Context, string) error { return pool.ErrUnsupported }
func (p *lateExitPool) Resume(context.Context, string) error  { return pool.ErrUnsupported }

// endpoints is a scheduler.EndpointSource of fixed endpoints.
type endpoints []core.Endpoint

func (e endpoints) ScanEndpoints(_ context.Context, fn func(core.Endpoint) error) error {
	for _, ep := range e {
		if err := fn(ep); err != nil {
			return err
		}
	}
	return nil
}

// TestGracefulStopOrder runs Shutdown's stop sequence (graceful) in process, many times, over a
// real scheduler, job engine and Pebble store, with workers holding jobs and their exits
// reported late: nothing may reach the store, and no worker event the scheduler, after the store
// closes; the jobs still running go back IN_QUEUE with retries 0; the quick ones complete.
func TestGracefulStopOrder(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ep := core.Endpoint{ID: "ep1", Owner: "alice", Type: core.TypeQueue, Container: core.Container{Image: "gantry/echo"},
		GPU: core.GPU{Pools: []string{"local"}, Count: 1}, Workers: core.Workers{Min: 3, Max: 3, IdleTimeout: 5},
		Scaling: core.Scaling{Type: core.ScaleQueueDelay, QueueDelay: 4}, Flashboot: core.FlashbootOff}
	for round := range 25 {
		dir := t.TempDir()
		pst, err := pebble.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		st := &watchedStore{Store: pst}
		js, err := memq.Open(st, memq.Options{})
		if err != nil {
			t.Fatal(err)
		}
		pl := &lateExitPool{store: st, stops: map[string]context.CancelFunc{}}
		e, err := NewEngine(EngineConfig{Jobs: core.JobsConfig{Store: js, Clock: core.SystemClock{}, Log: log},
			Scheduler: scheduler.Config{Pools: []pool.Pool{pl}, BaseURL: "http://127.0.0.1:1"}})
		if err != nil {
			t.Fatal(err)
		}
		jobs, sched := e.Jobs, e.Scheduler
		pl.jobs = jobs
		runCtx, stopRun := context.WithCancel(context.Background())
		ran := make(chan struct{})
		go func() { defer close(ran); sched.Run(runCtx, endpoints{ep}, 5*time.Millisecond, time.Hour) }()

		var ids []string
		for i := range 12 {
			ms := 1 + i%3
			if i < 3 {
				ms = 60000 // held by a worker at the stop
			}
			j, err := jobs.Submit(t.Context(), &ep, core.Submission{Input: fmt.Appendf(nil, `{"ms":%d}`, ms)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.ID)
		}
		for deadline := time.Now().Add(10 * time.Second); jobs.Running() < 3; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the workers hold %d jobs after 10 s; want 3", round, jobs.Running())
			}
			time.Sleep(time.Millisecond) // polling a condition, with a deadline
		}

		g := &graceful{log: log, grace: time.Duration(round%3) * 5 * time.Millisecond, drain: func() { jobs.Drain(); sched.Hold() }, jobs: jobs, sched: sched, exitWait: 10 * time.Second}
		g.drainJobs(nil)
		stopRun()
		<-ran
		g.stopWorkers()
		if err := st.close(); err != nil {
			t.Fatal(err)
		}
		pl.alive.Wait() // every worker stopped (Close stops them all) and its exit reported
		if op := st.late.Load(); op != nil {
			t.Fatalf("round %d: %s after the store closed", round, op)
		}
		if ev := pl.late.Load(); ev != nil {
			t.Fatalf("round %d: %s after the store closed", round, ev)
		}

		pst, err = pebble.Open(dir) // the next start
		if err != nil {
			t.Fatal(err)
		}
		ajs, err := pst.Jobs(memq.Options{})
		if err != nil {
			t.Fatal(err)
		}
		after := core.NewJobs(core.JobsConfig{Store: ajs, Clock: core.SystemClock{}, Log: log})
		if _, requeued, err := after.Recover(t.Context()); err != nil || requeued != 0 {
			t.Errorf("round %d: Recover = %d requeued, %v; want none requeued (nothing was left IN_PROGRESS)", round, requeued, err)
		}
		for i, id := range ids {
			j, err := after.Get(t.Context(), core.JobRef{Endpoint: ep.ID, ID: id}, 0)
			want := core.Completed
			if i < 3 {
				want = core.InQueue
			}
			if err != nil || j.Retries != 0 || (j.Status != want && !(want == core.Completed && j.Status == core.InQueue)) {
				t.Errorf("round %d: job %d after the stop = %s retries %d, %v; want %s with retries 0", round, i, j.Status, j.Retries, err, want)
			}
		}
		pst.Close()
	}
}

// TestDrainJobsGrace: drainJobs lets a running job finish within the grace period (it
// completes), puts back one that outlasts it with retries 0, and a second signal ends the wait
// at once.
func TestDrainJobsGrace(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ep := &core.Endpoint{ID: "ep1", Owner: "alice", Type: core.TypeQueue}
	for _, tc := range []struct {
		name   string
		grace  time.Duration
		runs   time.Duration // how long the job runs
		signal bool          // a second signal comes during the grace period
		want   core.JobStatus
	}{
		{"finishes within the grace", time.Minute, 20 * time.Millisecond, false, core.Completed},
		{"outlasts the grace", 20 * time.Millisecond, time.Hour, false, core.InQueue},
		{"no grace", 0, time.Hour, false, core.InQueue},
		{"second signal", time.Hour, time.Hour, true, core.InQueue},
	} {
		st, err := pebble.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		js, err := st.Jobs(memq.Options{})
		if err != nil {
			t.Fatal(err)
		}
		jobs := core.NewJobs(core.JobsConfig{Store: js, Clock: core.SystemClock{}, Log: log})
		jobs.RegisterWorker(ep.ID, "w1")
		j, err := jobs.Submit(t.Context(), ep, core.Submission{Input: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if got := jobs.Take(context.Background(), ep.ID, "w1", 1); len(got) != 1 {
			t.Fatalf("%s: Take = %d jobs; want 1", tc.name, len(got))
		}
		finish := time.AfterFunc(tc.runs, func() { _ = jobs.Done(t.Context(), ep.ID, "w1", j.ID, core.Result{Output: json.RawMessage(`1`)}) })
		cut := make(chan struct{})
		if tc.signal {
			close(cut)
		}
		g := &graceful{log: log, grace: tc.grace, drain: jobs.Drain, jobs: jobs}
		drained := make(chan struct{})
		go func() { defer close(drained); g.drainJobs(cut) }()
		select {
		case <-drained:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: drainJobs did not return within 10 s", tc.name)
		}
		finish.Stop()
		got, err := jobs.Get(t.Context(), core.JobRef{Endpoint: ep.ID, ID: j.ID}, 0)
		if err != nil || got.Status != tc.want || got.Retries != 0 {
			t.Errorf("%s: job after drainJobs = %s retries %d, %v; want %s, retries 0", tc.name, got.Status, got.Retries, err, tc.want)
		}
		st.Close()
	}
}
