package main

// The scheduler simulation (scenario "scheduler", and the in-process BenchmarkTick and
// BenchmarkPlacement): a world of endpoints and GPU pools run by the real scheduler.Scheduler
// over the real core.Jobs engine (store/memq over Pebble in a temp dir). Only the
// pools are simulated: a simPool implements pool.Pool in memory, and each of its workers
// is a goroutine that long-polls core.Jobs.Take and posts core.Jobs.Done, as a worker process
// does over HTTP.
//
// Time: the engine, the queues and the scheduler read a scaledClock that runs -sched-speed
// times faster than real time, so that the autoscaler's one-second tick, idle timeouts, boot
// and service times keep their meaning while the simulation takes a tenth of the wall time.
// Every latency the bench reports is taken on the real (monotonic) clock.

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/scheduler"
	gantryserver "github.com/gantryhq/gantry/server" // bench has a type server: a process it runs
	"github.com/gantryhq/gantry/store/memq"
	"github.com/gantryhq/gantry/store/pebble"
)

// scaledClock is a core.Clock that runs speed times faster than real time from its start.
type scaledClock struct {
	realStart time.Time // carries the monotonic reading
	simStart  time.Time
	speed     float64
}

func newScaledClock(speed float64) *scaledClock {
	now := time.Now()
	return &scaledClock{realStart: now, simStart: now, speed: speed}
}

// Now returns the simulated time.
func (c *scaledClock) Now() time.Time {
	return c.simStart.Add(time.Duration(float64(time.Since(c.realStart)) * c.speed))
}

// real converts a simulated duration into real time.
func (c *scaledClock) real(sim time.Duration) time.Duration {
	return time.Duration(float64(sim) / c.speed)
}

// --- the world ---------------------------------------------------------------------------------

// simSpec is a generated world: pools, endpoints and how each endpoint's workers behave.
type simSpec struct {
	pools []core.PoolInfo
	eps   []core.Endpoint
	prof  []simProfile // by endpoint index
}

// simProfile is how an endpoint's simulated workers behave, in simulated time.
type simProfile struct {
	boot    time.Duration // from Start to the first poll
	service time.Duration // per job
}

// The mix the world is drawn from. Weights are relative.
var (
	simGPUTypes = []weighted[string]{
		{"NVIDIA H100 80GB HBM3", 20}, {"NVIDIA A100-SXM4-80GB", 20}, {"NVIDIA L40S", 15},
		{"NVIDIA RTX A6000", 10}, {"NVIDIA GeForce RTX 4090", 20}, {"NVIDIA A10G", 10}, {"CPU", 5},
	}
	simDataCenters = []string{"US-TX-3", "US-GA-1", "US-CA-2", "EU-RO-1", "EU-SE-1", "EU-NL-1", "CA-MTL-1", "AP-JP-1"}
	simCUDA        = []string{"11.8", "12.1", "12.2", "12.4", "12.6", "12.8"} // a pool runs a prefix of these
	simPoolSizes   = []weighted[int]{{4, 20}, {8, 65}, {16, 15}}
	simGPUCounts   = []weighted[int]{{1, 80}, {2, 14}, {4, 5}, {8, 1}}
	simMins        = []weighted[int]{{0, 85}, {1, 12}, {2, 3}}
	simFlashboot   = []weighted[core.Flashboot]{{core.FlashbootOff, 60}, {core.FlashbootOn, 30}, {core.FlashbootPriority, 10}}
	simQueueDelays = []float64{1, 2, 4, 4, 4, 6, 10} // seconds; RunPod's default is 4
	simIdle        = []int{1, 5, 5, 10, 10, 30, 60}  // seconds
	simLog         = slog.New(slog.DiscardHandler)   // the scheduler logs every decision
	// simTakeTimeout is a worker's long poll, in simulated time. Simulated workers do not ping:
	// polling as often as a real worker pings (scheduler.PingInterval) keeps the job engine
	// from taking them for lost (core.WorkerLostAfter) while they hold a job.
	simTakeTimeout = scheduler.PingInterval
	simProbePrefix = []byte(`{"probe":`)                 // input of a latency probe job
	simLoadInput   = []byte(`{"prompt":"a lighthouse"}`) // input of a load job
)

type weighted[T any] struct {
	v T
	w int
}

func pick[T any](r *rand.Rand, ws []weighted[T]) T {
	total := 0
	for _, w := range ws {
		total += w.w
	}
	n := r.IntN(total)
	for _, w := range ws {
		if n < w.w {
			return w.v
		}
		n -= w.w
	}
	return ws[len(ws)-1].v
}

// logUniform draws a duration between lo and hi, uniform on a log scale.
func logUniform(r *rand.Rand, lo, hi time.Duration) time.Duration {
	l, h := math.Log(float64(lo)), math.Log(float64(hi))
	return time.Duration(math.Exp(l + r.Float64()*(h-l)))
}

// genWorld draws a world of nPools pools and nEndpoints endpoints from the mix above; the same
// seed gives the same world.
func genWorld(nEndpoints, nPools int, seed uint64) simSpec {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	var s simSpec
	cudaOf := map[string]int{} // pool id -> index of the newest CUDA version it runs
	byType := map[string][]int{}
	for i := range nPools {
		typ := pick(r, simGPUTypes)
		p := core.PoolInfo{ID: fmt.Sprintf("pool-%04d", i), Adapter: "sim", GPUType: typ, DisplayName: typ,
			GPUs: pick(r, simPoolSizes), DataCenter: simDataCenters[r.IntN(len(simDataCenters))], MemoryGB: 80}
		if typ == "CPU" {
			p.CPU, p.GPUs, p.VCPUs, p.MemoryPerCPU, p.MemoryGB = true, 8*(1+r.IntN(8)), 16, 4, 0
		} else {
			newest := 2 + r.IntN(len(simCUDA)-2)
			p.CUDAVersions = slices.Clone(simCUDA[:newest+1])
			cudaOf[p.ID] = newest
			if r.IntN(4) == 0 {
				p.PerWorker = max(p.GPUs/2, 1) // some hosts cap a worker at half the machine
			}
		}
		s.pools = append(s.pools, p)
		byType[typ] = append(byType[typ], i)
	}
	minHeld := make([]int, nPools) // GPUs the workers.min workers will hold, by pool
	for i := range nEndpoints {
		typ := pick(r, simGPUTypes)
		cands := byType[typ]
		if len(cands) == 0 || r.IntN(10) == 0 { // one in ten mixes GPU types
			cands = nil
		}
		var pools []string
		for range 1 + r.IntN(3) {
			var pi int
			if cands != nil {
				pi = cands[r.IntN(len(cands))]
			} else {
				pi = r.IntN(nPools)
			}
			if id := s.pools[pi].ID; !slices.Contains(pools, id) {
				pools = append(pools, id)
			}
		}
		firstIdx := slices.IndexFunc(s.pools, func(p core.PoolInfo) bool { return p.ID == pools[0] })
		first := s.pools[firstIdx]
		ep := core.Endpoint{ID: fmt.Sprintf("ep-%05d", i), Owner: "sim", Name: fmt.Sprintf("sim-%d", i), Type: core.TypeQueue,
			Container: core.Container{Image: "sim/worker"}, TimeoutMs: core.DefaultTimeoutMs,
			// A worker takes at most half its first pool, which workers.min never fills past
			// half (below): every endpoint finds room on it once the bursts' workers are gone.
			GPU:       core.GPU{Pools: pools, Count: min(pick(r, simGPUCounts), first.GPUsPerWorkerMax(), max(first.GPUs/2, 1))},
			Flashboot: pick(r, simFlashboot)}
		if r.IntN(10) < 6 {
			ep.Scaling = core.Scaling{Type: core.ScaleQueueDelay, QueueDelay: simQueueDelays[r.IntN(len(simQueueDelays))]}
			ep.Workers.IdleTimeout = simIdle[r.IntN(len(simIdle))]
		} else {
			ep.Scaling = core.Scaling{Type: core.ScaleRequestCount, RequestCount: 1 + r.IntN(10)}
		}
		ep.Workers.Min = pick(r, simMins)
		// workers.min holds at most half of any pool: of every pool the endpoint lists, for its
		// workers.min workers start on the first, but a scale-down may keep one on another
		// (when the first pool's were busy), and the scheduler does not move it back.
		listed := make([]int, len(pools))
		for k, id := range pools {
			listed[k] = slices.IndexFunc(s.pools, func(p core.PoolInfo) bool { return p.ID == id })
		}
		for m := ep.Workers.Min; m > 0; m-- {
			if !slices.ContainsFunc(listed, func(pi int) bool { return minHeld[pi]+m*ep.GPU.Count > s.pools[pi].GPUs/2 }) {
				for _, pi := range listed {
					minHeld[pi] += m * ep.GPU.Count
				}
				break
			}
			ep.Workers.Min = m - 1
		}
		ep.Workers.Max = max(ep.Workers.Min, 1+r.IntN(10))
		if r.IntN(10) < 3 { // pinned to data centers: the first pool's, maybe another
			ep.DataCenterIDs = []string{first.DataCenter}
			if dc := simDataCenters[r.IntN(len(simDataCenters))]; r.IntN(2) == 0 && dc != first.DataCenter {
				ep.DataCenterIDs = append(ep.DataCenterIDs, dc)
			}
		}
		if n, ok := cudaOf[first.ID]; ok && r.IntN(10) < 3 { // CUDA versions the first pool runs
			ep.AllowedCudaVersions = []string{simCUDA[r.IntN(n+1)]}
			if r.IntN(2) == 0 {
				if v := simCUDA[r.IntN(len(simCUDA))]; v != ep.AllowedCudaVersions[0] {
					ep.AllowedCudaVersions = append(ep.AllowedCudaVersions, v)
				}
			}
		}
		s.eps = append(s.eps, ep)
		s.prof = append(s.prof, simProfile{
			boot:    logUniform(r, time.Second, 8*time.Second),
			service: logUniform(r, 20*time.Millisecond, 500*time.Millisecond),
		})
	}
	return s
}

// gpus returns the total capacity of the pools.
func (s simSpec) gpus() int {
	n := 0
	for _, p := range s.pools {
		n += p.GPUs
	}
	return n
}

// wants returns what each endpoint's workers need from the pools.
func (s simSpec) wants() []scheduler.Want {
	out := make([]scheduler.Want, len(s.eps))
	for i := range s.eps {
		out[i] = scheduler.WantOf(&s.eps[i], func(string) (string, bool) { return "", false })
	}
	return out
}

// describedPools returns pools that only describe themselves, for a bare Placer.
func (s simSpec) describedPools() []pool.Pool {
	out := make([]pool.Pool, len(s.pools))
	for i, p := range s.pools {
		out[i] = &simPool{info: p}
	}
	return out
}

// --- the engine ----------------------------------------------------------------------------------

// simEngine runs a world: the job engine, the queues, the scheduler and the simulated pools.
type simEngine struct {
	spec   simSpec
	clock  *scaledClock
	store  *pebble.Store
	jobs   *core.Jobs
	queues *memq.Store // the job store: its queues and parked takers
	sched  *scheduler.Scheduler
	pools  []*simPool
	idx    map[string]int // endpoint id -> index

	stop context.CancelFunc
	bg   sync.WaitGroup

	alive, started, exited atomic.Int64 // workers
	maxAlive               atomic.Int64 // high-water mark of alive
	suspends, resumes      atomic.Int64
	done, doneErrs         atomic.Int64 // load jobs completed by workers; refused Done posts
	probes                 probeBook
}

// newSimEngine wires the world as the server does (package server's Engine), with the
// simulated pools and the scaled clock; dir holds the Pebble store.
func newSimEngine(spec simSpec, dir string, speed float64) (*simEngine, error) {
	st, err := pebble.Open(dir)
	if err != nil {
		return nil, err
	}
	e := &simEngine{spec: spec, clock: newScaledClock(speed), store: st, idx: make(map[string]int, len(spec.eps))}
	for i, ep := range spec.eps {
		e.idx[ep.ID] = i
	}
	if e.queues, err = st.Jobs(memq.Options{Clock: e.clock}); err != nil {
		_ = st.Close()
		return nil, err
	}
	pools := make([]pool.Pool, len(spec.pools))
	for i, p := range spec.pools {
		e.pools = append(e.pools, &simPool{info: p, e: e, live: map[string]*simWorker{}})
		pools[i] = e.pools[i]
	}
	eng, err := gantryserver.NewEngine(gantryserver.EngineConfig{
		Jobs:      core.JobsConfig{Store: e.queues, Clock: e.clock, Log: simLog},
		Scheduler: scheduler.Config{Pools: pools, BaseURL: "http://127.0.0.1:1"}})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	e.jobs, e.sched = eng.Jobs, eng.Scheduler
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	// The job engine's deadlines tick every 250 ms of simulated time, as serve's do in real time.
	e.bg.Go(func() { e.jobs.Run(ctx, max(e.clock.real(250*time.Millisecond), time.Millisecond)) })
	for i := range spec.eps {
		e.sched.Set(spec.eps[i])
	}
	return e, nil
}

// close stops every worker, then the engine and the store.
func (e *simEngine) close() {
	e.sched.Close()
	e.stop()
	e.bg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for e.alive.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	_ = e.store.Close()
}

// tick runs one autoscaler pass at the simulated now.
func (e *simEngine) tick() { e.sched.Tick(e.clock.Now()) }

// minWanted returns how many workers workers.min asks for, in all.
func (e *simEngine) minWanted() int {
	n := 0
	for _, ep := range e.spec.eps {
		n += ep.Workers.Min
	}
	return n
}

// parked returns how many workers are parked in a job-take across the endpoints.
func (e *simEngine) parked() int {
	n := 0
	for _, ep := range e.spec.eps {
		n += e.queues.Parked(ep.ID)
	}
	return n
}

// usedGPUs returns the pools' reserved capacity.
func (e *simEngine) usedGPUs() int {
	used := 0
	for _, p := range e.spec.pools {
		used += p.GPUs - e.sched.Placer().Free(p.ID)
	}
	return used
}

// --- pools and workers -------------------------------------------------------------------------

// simPool is a pool.Pool whose workers are goroutines of this process.
type simPool struct {
	info core.PoolInfo
	e    *simEngine // nil for a pool that only describes itself

	mu   sync.Mutex
	live map[string]*simWorker
}

// simWorker is one simulated worker.
type simWorker struct {
	spec      pool.WorkerSpec
	ep        *core.Endpoint
	prof      simProfile
	cancel    context.CancelFunc
	suspended bool // under the pool's mu
}

func (p *simPool) Describe() core.PoolInfo { return p.info }

// Start starts the worker's goroutine: it boots (sleeps its endpoint's boot time), then takes
// and runs jobs until it is stopped.
func (p *simPool) Start(_ context.Context, spec pool.WorkerSpec) error {
	i, ok := p.e.idx[spec.Endpoint]
	if !ok {
		return fmt.Errorf("starting worker %s: no endpoint %q in the simulation", spec.ID, spec.Endpoint)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &simWorker{spec: spec, ep: &p.e.spec.eps[i], prof: p.e.spec.prof[i], cancel: cancel}
	p.mu.Lock()
	p.live[spec.ID] = w
	p.mu.Unlock()
	p.e.started.Add(1)
	if n := p.e.alive.Add(1); n > p.e.maxAlive.Load() {
		p.e.maxAlive.Store(n) // a high-water mark; a lost race only understates it
	}
	spec.Report(pool.WorkerEvent{Worker: spec.ID, State: pool.WorkerRunning, At: time.Now()})
	go p.run(ctx, w)
	return nil
}

// run is the worker's life.
func (p *simPool) run(ctx context.Context, w *simWorker) {
	e := p.e
	defer func() {
		p.mu.Lock()
		delete(p.live, w.spec.ID)
		p.mu.Unlock()
		e.alive.Add(-1)
		e.exited.Add(1)
		w.spec.Report(pool.WorkerEvent{Worker: w.spec.ID, State: pool.WorkerExited, At: time.Now(), Stopped: true})
	}()
	if !sleepCtx(ctx, e.clock.real(w.prof.boot)) {
		return
	}
	poll := e.clock.real(simTakeTimeout)
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, poll)
		got := e.jobs.Take(pctx, w.ep.ID, w.spec.ID, 1)
		at := time.Now()
		cancel()
		for _, t := range got {
			if len(t.Input) > len(simProbePrefix) && string(t.Input[:len(simProbePrefix)]) == string(simProbePrefix) {
				e.probes.taken(w.ep.ID, t.Input, at)
				_ = e.jobs.Done(ctx, w.ep.ID, w.spec.ID, t.ID, core.Result{Output: []byte(`1`)})
				e.probes.finished(w.ep.ID)
				continue
			}
			sleepCtx(ctx, e.clock.real(w.prof.service))
			if err := e.jobs.Done(ctx, w.ep.ID, w.spec.ID, t.ID, core.Result{Output: t.Input}); err != nil {
				e.doneErrs.Add(1) // the job was taken back (worker lost, timeout): it runs again
				continue
			}
			e.done.Add(1)
		}
	}
}

// sleepCtx sleeps d or until ctx ends; it reports whether it slept the whole d.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Stop ends the worker's goroutine; its exit reports WorkerExited.
func (p *simPool) Stop(_ context.Context, id string) error {
	p.mu.Lock()
	w := p.live[id]
	p.mu.Unlock()
	if w != nil {
		w.cancel()
	}
	return nil
}

// Suspend keeps the worker: the job engine already parks its polls (SuspendWorker), so there
// is nothing to pause but the bookkeeping.
func (p *simPool) Suspend(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.live[id]
	if w == nil {
		return fmt.Errorf("suspending worker %s: no such worker", id)
	}
	w.suspended = true
	p.e.suspends.Add(1)
	return nil
}

// Resume lets the worker run again; its parked poll returns once the job engine resumes it.
func (p *simPool) Resume(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.live[id]
	if w == nil || !w.suspended {
		return fmt.Errorf("resuming worker %s: not suspended", id)
	}
	w.suspended = false
	p.e.resumes.Add(1)
	return nil
}

var _ pool.Pool = (*simPool)(nil)

// --- probes: a job reaching an idle warm worker ------------------------------------------------

// probeBook times probe jobs from just before Submit to the moment the worker's Take returns
// them; both ends read the monotonic clock as offsets from base.
type probeBook struct {
	base time.Time

	mu       sync.Mutex
	lat      []time.Duration // Submit -> Take returned
	sub      []time.Duration // Submit alone
	inFlight map[string]bool // endpoint -> a probe is on its way
	signal   chan struct{}   // one token per finished probe (dropped when full)
}

func (b *probeBook) init() {
	b.base = time.Now()
	b.inFlight = map[string]bool{}
	b.signal = make(chan struct{}, 1)
}

// input returns a probe's input stamped with now.
func (b *probeBook) input() []byte {
	return strconv.AppendInt(append([]byte(nil), simProbePrefix...), int64(time.Since(b.base)), 10)
}

// claim marks a probe in flight to the endpoint; false when one already is.
func (b *probeBook) claim(ep string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inFlight[ep] {
		return false
	}
	b.inFlight[ep] = true
	return true
}

func (b *probeBook) unclaim(ep string) {
	b.mu.Lock()
	delete(b.inFlight, ep)
	b.mu.Unlock()
}

// taken records a probe's latency: at is when the worker's Take returned.
func (b *probeBook) taken(_ string, input []byte, at time.Time) {
	digits := input[len(simProbePrefix):]
	if i := slices.Index(digits, '}'); i >= 0 {
		digits = digits[:i]
	}
	sent, err := strconv.ParseInt(string(digits), 10, 64)
	if err != nil {
		return
	}
	d := at.Sub(b.base) - time.Duration(sent)
	b.mu.Lock()
	b.lat = append(b.lat, d)
	b.mu.Unlock()
}

// finished frees the endpoint for the next probe and signals a waiting prober.
func (b *probeBook) finished(ep string) {
	b.unclaim(ep)
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// submitted records how long a probe's Submit took.
func (b *probeBook) submitted(d time.Duration) {
	b.mu.Lock()
	b.sub = append(b.sub, d)
	b.mu.Unlock()
}

// take returns the latencies recorded so far (Submit to Take, and Submit alone) and starts
// new lists.
func (b *probeBook) take() (lat, sub []time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	lat, sub = b.lat, b.sub
	b.lat, b.sub = nil, nil
	return lat, sub
}

// --- measuring -------------------------------------------------------------------------------

// threadCPU returns the CPU time of the calling OS thread (CLOCK_THREAD_CPUTIME_ID); with the
// goroutine locked to its thread, that is the goroutine's own CPU time.
func threadCPU() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTimeID = 3
	_, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}

// durations summarises a sample of durations.
type durations struct {
	n                  int
	p50, p99, max, avg time.Duration
}

func summarize(ds []time.Duration) durations {
	if len(ds) == 0 {
		return durations{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	pct := func(p float64) time.Duration {
		i := int(p/100*float64(len(s))+0.5) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return durations{n: len(s), p50: pct(50), p99: pct(99), max: s[len(s)-1], avg: sum / time.Duration(len(s))}
}

// us renders a duration in microseconds below a millisecond, in milliseconds above.
func us(d time.Duration) string {
	if d >= time.Millisecond {
		return ms(d)
	}
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}

// schedLatencies reads the Go scheduler's histogram of how long runnable goroutines waited
// for a CPU (runtime/metrics /sched/latencies:seconds), and the stop-the-world pauses of the GC.
func schedLatencies() (sched, gcPauses *metrics.Float64Histogram) {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}, {Name: "/sched/pauses/total/gc:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram || s[1].Value.Kind() != metrics.KindFloat64Histogram {
		return nil, nil
	}
	return s[0].Value.Float64Histogram(), s[1].Value.Float64Histogram()
}

// histDelta summarises the events a histogram gained between two reads: how many, and the
// upper bounds of the buckets holding the median, the 99th percentile and the largest one.
func histDelta(a, b *metrics.Float64Histogram) (n uint64, p50, p99, top time.Duration) {
	if a == nil || b == nil || len(a.Counts) != len(b.Counts) {
		return 0, 0, 0, 0
	}
	counts := make([]uint64, len(b.Counts))
	for i := range counts {
		counts[i] = b.Counts[i] - a.Counts[i]
		n += counts[i]
	}
	bound := func(i int) time.Duration {
		ub := b.Buckets[i+1]
		if math.IsInf(ub, 1) {
			ub = b.Buckets[i]
		}
		return time.Duration(ub * float64(time.Second))
	}
	var cum uint64
	for i, c := range counts {
		if c == 0 {
			continue
		}
		cum += c
		if p50 == 0 && cum*2 >= n {
			p50 = bound(i)
		}
		if p99 == 0 && cum*100 >= n*99 {
			p99 = bound(i)
		}
		top = bound(i)
	}
	return n, p50, p99, top
}
