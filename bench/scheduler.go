package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/scheduler"
)

// Phases of the scheduler simulation, for the tick samples.
const (
	phaseWarmup int32 = iota
	phaseLoad
	phaseQuiet
	nPhases
)

// tickSample is one autoscaler tick: wall time and the CPU time of the ticking goroutine.
type tickSample struct{ wall, cpu time.Duration }

// tickRecorder runs Scheduler.Tick every interval (one simulated second) and times each tick.
type tickRecorder struct {
	phase   atomic.Int32
	mu      sync.Mutex
	samples [nPhases][]tickSample
	floor   [nPhases][]tickSample // the spinning floor's samples (runFloor)
}

// runFloor is the scheduling floor beside the tick: on a goroutine locked to its OS thread,
// every interval, half an interval after the tick's cadence, it spins until its thread has
// used spin of CPU time, touching no lock and allocating nothing, and records the wall time
// that took. Under the same load, no tick that costs spin of CPU can return faster than that.
func (r *tickRecorder) runFloor(ctx context.Context, every, spin time.Duration) {
	x := uint64(1)
	r.loop(ctx, every, every/2, &r.floor, func() {
		for c0 := threadCPU(); threadCPU()-c0 < spin; {
			for range 2000 {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}
		floorSink.Store(x)
	})
}

// floorSink keeps the floor's arithmetic from being optimized away.
var floorSink atomic.Uint64

// run ticks until ctx ends.
func (r *tickRecorder) run(ctx context.Context, e *simEngine, every time.Duration) {
	r.loop(ctx, every, 0, &r.samples, func() { e.sched.Tick(e.clock.Now()) })
}

// loop calls fn every interval, after a first delay, until ctx ends, and records the wall and
// CPU time of each call into the current phase's samples. It runs on a goroutine locked to its
// OS thread, so that the thread's CPU clock is fn's own CPU time.
func (r *tickRecorder) loop(ctx context.Context, every, delay time.Duration, into *[nPhases][]tickSample, fn func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	select {
	case <-ctx.Done():
		return
	case <-time.After(delay):
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ph := r.phase.Load()
		c0, t0 := threadCPU(), time.Now()
		fn()
		s := tickSample{wall: time.Since(t0), cpu: threadCPU() - c0}
		r.mu.Lock()
		into[ph] = append(into[ph], s)
		r.mu.Unlock()
	}
}

func (r *tickRecorder) get(ph int32) (wall, cpu []time.Duration) {
	return r.getOf(&r.samples, ph)
}

func (r *tickRecorder) getOf(from *[nPhases][]tickSample, ph int32) (wall, cpu []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range from[ph] {
		wall, cpu = append(wall, s.wall), append(cpu, s.cpu)
	}
	return wall, cpu
}

func (r *tickRecorder) count(ph int32) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.samples[ph])
}

// placeResult is one placement measurement.
type placeResult struct {
	ok, failed int64
	elapsed    time.Duration
	fill       float64 // share of the capacity held by other reservations throughout
	procs      int
	cpu        time.Duration // this process's CPU time over the measurement
}

func (r placeResult) rate() float64 { return float64(r.ok) / r.elapsed.Seconds() }

// measurePlacement runs Placer.Place + Reservation.Release from procs goroutines (with
// GOMAXPROCS set to procs, as go test -cpu does) for d, over the world's pools with fill of
// their capacity held by standing reservations; each goroutine walks the endpoints' wants.
func measurePlacement(spec simSpec, procs int, d time.Duration, fill float64, seed uint64) (placeResult, error) {
	placer, err := scheduler.NewPlacer(spec.describedPools())
	if err != nil {
		return placeResult{}, err
	}
	held := prefill(placer, spec, fill, seed)
	wants := spec.wants()
	prev := runtime.GOMAXPROCS(procs)
	defer runtime.GOMAXPROCS(prev)
	runtime.GC()
	var stop atomic.Bool
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	cpu0 := processCPU()
	start := time.Now()
	for g := range procs {
		wg.Go(func() {
			i := g * len(wants) / procs
			var n, f int64
			for !stop.Load() {
				for range 256 {
					if r, err := placer.Place(wants[i]); err == nil {
						r.Release()
						n++
					} else {
						f++
					}
					if i++; i == len(wants) {
						i = 0
					}
				}
			}
			ok.Add(n)
			failed.Add(f)
		})
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return placeResult{ok: ok.Load(), failed: failed.Load(), elapsed: time.Since(start),
		fill: float64(held) / float64(spec.gpus()), procs: procs, cpu: processCPU() - cpu0}, nil
}

// processCPU returns the CPU time (user + system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// prefill reserves single GPUs on random pools until fill of the capacity is held, and returns
// how many it holds.
func prefill(placer *scheduler.Placer, spec simSpec, fill float64, seed uint64) int {
	r := rand.New(rand.NewPCG(seed, 7))
	target := int(fill * float64(spec.gpus()))
	held := 0
	for tries := 0; held < target && tries < 100*target+1000; tries++ {
		p := spec.pools[r.IntN(len(spec.pools))]
		if _, err := placer.Place(scheduler.Want{Pools: []string{p.ID}, Count: 1}); err == nil {
			held++
		}
	}
	return held
}

// schedRun is what one run of the simulation measured.
type schedRun struct {
	spec                    simSpec
	warmup                  time.Duration // until workers.min workers polled
	warmParked, minWanted   int
	firstTick               time.Duration
	submitted, submitErrs   int64
	submitTime, loadTime    time.Duration // all bursts submitted; all jobs done
	completed, doneErrs     int64
	maxAlive, started       int64
	suspends, resumes       int64
	maxUsed                 int
	loadWall, loadCPU       durations
	floorWall, floorCPU     durations // the spinning floor beside the ticks (runFloor)
	quietWall, quietCPU     durations
	loadProbes, quietProbes durations
	loadProbeSubmit         durations // Submit's own share of loadProbes
	probeSkips              int64
	probeEndpoints          int
	place, placeEmpty       placeResult
	profile                 string // CPU profile of the load phase, when taken
	drained                 bool
	// Go runtime during the load: how long runnable goroutines waited for a CPU, and GC
	// stop-the-world pauses (bucket upper bounds of runtime/metrics histograms).
	schedN, gcN                  uint64
	schedP50, schedP99, schedMax time.Duration
	gcP99, gcMax                 time.Duration
	stuck                        string // why jobs were left, when some were
}

func (b *bench) scenarioScheduler() error {
	o := b.o
	logf("scheduler: generating %d endpoints over %d pools (seed %d)", o.schedEndpoints, o.schedPools, o.schedSeed)
	spec := genWorld(o.schedEndpoints, o.schedPools, o.schedSeed)
	run := schedRun{spec: spec}
	e, err := newSimEngine(spec, filepath.Join(b.tmp, "scheduler-pebble"), o.schedSpeed)
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			e.close()
		}
	}()
	e.probes.init()
	rec := &tickRecorder{}
	tickCtx, stopTicks := context.WithCancel(context.Background())
	defer stopTicks()
	every := e.clock.real(time.Second)
	var ticking sync.WaitGroup
	ticking.Go(func() { rec.run(tickCtx, e, every) })
	if o.schedFloorCPU > 0 {
		ticking.Go(func() { rec.runFloor(tickCtx, every, o.schedFloorCPU) })
	}

	// Warm-up: the first ticks start every endpoint's workers.min workers.
	run.minWanted = e.minWanted()
	t0 := time.Now()
	last, steady := -1, 0
	for time.Since(t0) < 30*time.Second && steady < 10 {
		time.Sleep(100 * time.Millisecond)
		n := e.parked()
		if n == last && n > 0 {
			steady++
		} else {
			steady = 0
		}
		last = n
	}
	run.warmup, run.warmParked = time.Since(t0), last
	if w, _ := rec.get(phaseWarmup); len(w) > 0 {
		run.firstTick = w[0]
	}
	logf("scheduler: %d of %d workers.min workers parked after %v (first tick %v)", run.warmParked, run.minWanted, run.warmup.Round(time.Millisecond), run.firstTick)

	// Probe endpoints: some with workers.min >= 1, kept out of the bursts so that their idle
	// workers stay parked.
	var probeEps, burstEps []int
	for i, ep := range spec.eps {
		if ep.Workers.Min >= 1 && len(probeEps) < o.schedProbeEndpoints && e.queues.Parked(ep.ID) > 0 {
			probeEps = append(probeEps, i)
		} else {
			burstEps = append(burstEps, i)
		}
	}
	run.probeEndpoints = len(probeEps)
	if len(probeEps) == 0 || len(burstEps) == 0 {
		return fmt.Errorf("no endpoint has an idle worker after the warm-up (%d parked)", run.warmParked)
	}

	// The load: bursts of jobs through core.Jobs.Submit, with probes beside them.
	var profFile *os.File
	if o.profile {
		run.profile = filepath.Join(b.tmp, "scheduler-load.prof")
		if profFile, err = os.Create(run.profile); err == nil {
			err = pprof.StartCPUProfile(profFile)
		}
		if err != nil {
			return fmt.Errorf("starting the CPU profile: %w", err)
		}
	}
	rec.phase.Store(phaseLoad)
	probeCtx, stopProbes := context.WithCancel(context.Background())
	var probing sync.WaitGroup
	var skips atomic.Int64
	probing.Go(func() { skips.Store(probeLoop(probeCtx, e, probeEps, o.schedProbeEvery, o.schedSeed)) })
	var maxUsed atomic.Int64
	probing.Go(func() { // capacity in use, sampled
		for sleepCtx(probeCtx, 200*time.Millisecond) {
			if u := int64(e.usedGPUs()); u > maxUsed.Load() {
				maxUsed.Store(u)
			}
		}
	})
	sched0, gc0 := schedLatencies()
	loadStart := time.Now()
	run.submitted, run.submitErrs = burstLoad(e, burstEps, o)
	run.submitTime = time.Since(loadStart)
	logf("scheduler: %d jobs submitted in %v (%d errors); waiting for the workers to finish them", run.submitted, run.submitTime.Round(time.Millisecond), run.submitErrs)
	deadline := time.Now().Add(o.schedDrain)
	for lastLog := time.Now(); e.done.Load() < run.submitted-run.submitErrs && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			logf("scheduler: %d jobs done, %d workers alive; left: %s", e.done.Load(), e.alive.Load(), e.stuckReport())
		}
	}
	run.loadTime = time.Since(loadStart)
	sched1, gc1 := schedLatencies()
	run.schedN, run.schedP50, run.schedP99, run.schedMax = histDelta(sched0, sched1)
	run.gcN, _, run.gcP99, run.gcMax = histDelta(gc0, gc1)
	run.completed, run.doneErrs = e.done.Load(), e.doneErrs.Load()
	run.drained = run.completed >= run.submitted-run.submitErrs
	if !run.drained {
		run.stuck = e.stuckReport()
		logf("scheduler: not drained: %s", run.stuck)
	}
	stopProbes()
	probing.Wait()
	if profFile != nil {
		pprof.StopCPUProfile()
		_ = profFile.Close()
	}
	run.probeSkips = skips.Load()
	lat, sub := e.probes.take()
	run.loadProbes, run.loadProbeSubmit = summarize(lat), summarize(sub)
	run.maxAlive, run.started, run.suspends, run.resumes = e.maxAlive.Load(), e.started.Load(), e.suspends.Load(), e.resumes.Load()
	run.maxUsed = int(maxUsed.Load())
	w, c := rec.get(phaseLoad)
	run.loadWall, run.loadCPU = summarize(w), summarize(c)
	fw, fc := rec.getOf(&rec.floor, phaseLoad)
	run.floorWall, run.floorCPU = summarize(fw), summarize(fc)
	logf("scheduler: %d of %d jobs done in %v; ticks under load (%d): wall p50 %v p99 %v max %v, CPU p99 %v",
		run.completed, run.submitted, run.loadTime.Round(time.Millisecond), run.loadWall.n, run.loadWall.p50, run.loadWall.p99, run.loadWall.max, run.loadCPU.p99)

	// Quiet: let idle workers retire, then probe sequentially and tick on a quiet machine.
	settle := time.Now()
	lastAlive, steady := int64(-1), 0
	for time.Since(settle) < 15*time.Second && steady < 10 {
		time.Sleep(100 * time.Millisecond)
		if a := e.alive.Load(); a == lastAlive {
			steady++
		} else {
			lastAlive, steady = a, 0
		}
	}
	rec.phase.Store(phaseQuiet)
	_, _ = e.probes.take()
	quiet, err := sequentialProbes(e, probeEps, o.schedWarmN, o.schedSeed)
	if err != nil {
		return err
	}
	run.quietProbes = summarize(quiet)
	for rec.count(phaseQuiet) < 30 {
		time.Sleep(every)
	}
	stopTicks()
	ticking.Wait()
	w, c = rec.get(phaseQuiet)
	run.quietWall, run.quietCPU = summarize(w), summarize(c)
	logf("scheduler: idle warm worker: p50 %v p99 %v (n %d) quiet; p50 %v p99 %v (n %d) under load",
		run.quietProbes.p50, run.quietProbes.p99, run.quietProbes.n, run.loadProbes.p50, run.loadProbes.p99, run.loadProbes.n)

	// Placement, on its own: the simulated workers are idle and the ticks have stopped.
	logf("scheduler: Place + Release for %v from %d goroutines (GOMAXPROCS %d)", o.schedPlaceDuration, o.schedPlaceProcs, o.schedPlaceProcs)
	if run.placeEmpty, err = measurePlacement(spec, o.schedPlaceProcs, o.schedPlaceDuration, 0, o.schedSeed); err != nil {
		return err
	}
	if run.place, err = measurePlacement(spec, o.schedPlaceProcs, o.schedPlaceDuration, o.schedPlaceFill, o.schedSeed); err != nil {
		return err
	}
	logf("scheduler: %.0f reservations/s with %.0f%% held (%d failed Place calls); %.0f/s with none held",
		run.place.rate(), 100*run.place.fill, run.place.failed, run.placeEmpty.rate())
	e.close()
	closed = true
	b.reportScheduler(run)
	return nil
}

// stuckReport describes the endpoints that still have jobs: how many, their workers, and the
// reasons /health gives, most common first.
func (e *simEngine) stuckReport() string {
	reasons := map[string]int{}
	var eps, queued, running, idle, initializing, throttled, suspended int64
	pools := map[string]bool{}
	for _, ep := range e.spec.eps {
		h := e.jobs.Health(context.Background(), ep.ID)
		if h.InQueue+h.InProgress == 0 {
			continue
		}
		for _, p := range ep.GPU.Pools {
			pools[p] = true
		}
		eps++
		queued += h.InQueue
		running += h.InProgress
		idle += int64(h.Idle)
		initializing += int64(h.Initializing)
		throttled += int64(h.Throttled)
		suspended += int64(h.Suspended)
		why := h.Reason
		if i := strings.IndexAny(why, "0123456789"); i > 0 {
			why = why[:i] // "waiting for capacity: pool-0001: 8 of 8 in use..." -> its kind
		}
		reasons[why]++
	}
	type kv struct {
		k string
		n int
	}
	var top []kv
	for k, n := range reasons {
		top = append(top, kv{k, n})
	}
	slices.SortFunc(top, func(a, b kv) int { return b.n - a.n })
	var rs []string
	for _, t := range top[:min(len(top), 5)] {
		rs = append(rs, fmt.Sprintf("%d: %q", t.n, t.k))
	}
	// What holds the capacity of the pools they list.
	var gpus, free, wSuspended, wAtMin, wAway, wOther int
	for _, p := range e.pools {
		if !pools[p.info.ID] {
			continue
		}
		gpus += p.info.GPUs
		free += e.sched.Placer().Free(p.info.ID)
		p.mu.Lock()
		perEp := map[string]int{}
		for _, w := range p.live {
			switch {
			case w.suspended:
				wSuspended++
			default:
				perEp[w.ep.ID]++
				if perEp[w.ep.ID] <= w.ep.Workers.Min {
					wAtMin++
					if w.ep.GPU.Pools[0] != p.info.ID {
						wAway++ // a workers.min worker on a pool its endpoint prefers less
					}
				} else {
					wOther++
				}
			}
		}
		p.mu.Unlock()
	}
	return fmt.Sprintf("%d endpoints with %d jobs queued and %d running; their workers: %d idle, %d initializing, %d throttled, %d suspended; reasons: %s; "+
		"the %d pools they list have %d GPUs, %d free, held by %d suspended workers, %d workers within their endpoint's workers.min (%d of them away from its first pool) and %d others",
		eps, queued, running, idle, initializing, throttled, suspended, strings.Join(rs, "; "), len(pools), gpus, free, wSuspended, wAtMin, wAway, wOther)
}

// burstLoad submits the jobs in bursts: each burst goes to a random set of endpoints, each job
// to one of them at random, from several goroutines at once (as the API's handlers would).
func burstLoad(e *simEngine, eps []int, o options) (submitted, errs int64) {
	r := rand.New(rand.NewPCG(o.schedSeed, 11))
	per := o.schedJobs / max(o.schedBursts, 1)
	var sub, bad atomic.Int64
	for k := range o.schedBursts {
		start := time.Now()
		n := per
		if k == o.schedBursts-1 {
			n = o.schedJobs - per*(o.schedBursts-1)
		}
		size := min(o.schedBurstMin+r.IntN(max(o.schedBurstMax-o.schedBurstMin, 1)), len(eps))
		set := make([]int, size)
		for i, j := range r.Perm(len(eps))[:size] {
			set[i] = eps[j]
		}
		var wg sync.WaitGroup
		for g := range o.schedSubmitters {
			share := n / o.schedSubmitters
			if g == o.schedSubmitters-1 {
				share = n - share*(o.schedSubmitters-1)
			}
			seed := r.Uint64()
			wg.Go(func() {
				gr := rand.New(rand.NewPCG(seed, uint64(g)))
				for range share {
					ep := &e.spec.eps[set[gr.IntN(len(set))]]
					if _, err := e.jobs.Submit(context.Background(), ep, core.Submission{Input: simLoadInput, Sync: !o.schedDurable}); err != nil {
						bad.Add(1)
					}
					sub.Add(1)
				}
			})
		}
		wg.Wait()
		logf("scheduler: burst %d/%d: %d jobs on %d endpoints in %v; %d workers alive, %d jobs done",
			k+1, o.schedBursts, n, size, time.Since(start).Round(time.Millisecond), e.alive.Load(), e.done.Load())
		if k < o.schedBursts-1 {
			time.Sleep(time.Until(start.Add(o.schedBurstEvery)))
		}
	}
	return sub.Load(), bad.Load()
}

// probeLoop submits a probe job every interval to a random probe endpoint that has a parked
// worker and no probe in flight, until ctx ends; it returns how many slots it skipped.
func probeLoop(ctx context.Context, e *simEngine, eps []int, every time.Duration, seed uint64) (skipped int64) {
	r := rand.New(rand.NewPCG(seed, 13))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return skipped
		case <-t.C:
		}
		if !submitProbe(e, &e.spec.eps[eps[r.IntN(len(eps))]]) {
			skipped++
		}
	}
}

// submitProbe submits one probe job (runsync: not synced) if the endpoint has an idle parked
// worker and no probe in flight.
func submitProbe(e *simEngine, ep *core.Endpoint) bool {
	if e.queues.Parked(ep.ID) == 0 || !e.probes.claim(ep.ID) {
		return false
	}
	in := e.probes.input()
	t0 := time.Now()
	if _, err := e.jobs.Submit(context.Background(), ep, core.Submission{Input: in, Sync: true}); err != nil {
		e.probes.unclaim(ep.ID)
		return false
	}
	e.probes.submitted(time.Since(t0))
	return true
}

// sequentialProbes submits n probes one at a time, each to a random probe endpoint with an
// idle parked worker, waiting for each to be taken and done before the next.
func sequentialProbes(e *simEngine, eps []int, n int, seed uint64) ([]time.Duration, error) {
	r := rand.New(rand.NewPCG(seed, 17))
	select {
	case <-e.probes.signal:
	default:
	}
	misses := 0
	for sent := 0; sent < n; {
		if !submitProbe(e, &e.spec.eps[eps[r.IntN(len(eps))]]) {
			if misses++; misses > 100*n+1000 {
				return nil, fmt.Errorf("no probe endpoint has an idle parked worker (after %d probes)", sent)
			}
			continue
		}
		sent++
		select {
		case <-e.probes.signal:
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("probe %d was not taken within 10 s", sent)
		}
	}
	lat, _ := e.probes.take()
	return lat, nil
}

// reportScheduler writes the scheduler section.
func (b *bench) reportScheduler(r schedRun) {
	o := b.o
	s := r.spec
	var qd, rc, fb, pfb, dcs, cudas int
	mins := map[int]int{}
	for _, ep := range s.eps {
		if ep.Scaling.Type == core.ScaleQueueDelay {
			qd++
		} else {
			rc++
		}
		switch ep.Flashboot {
		case core.FlashbootOn:
			fb++
		case core.FlashbootPriority:
			pfb++
		}
		if len(ep.DataCenterIDs) > 0 {
			dcs++
		}
		if len(ep.AllowedCudaVersions) > 0 {
			cudas++
		}
		mins[ep.Workers.Min]++
	}
	types := map[string]int{}
	for _, p := range s.pools {
		types[p.GPUType] += p.GPUs
	}
	var typeList []string
	for t, n := range types {
		typeList = append(typeList, fmt.Sprintf("%s %d", t, n))
	}
	slices.Sort(typeList)
	mode := "runsync-style, not synced (core.Submission{Sync: true}): with a sync per job the run would measure the disk's fsync rate, not the scheduler"
	if o.schedDurable {
		mode = "durable (/run-style: each job synced before Submit returns)"
	}
	sec := section{noBare: true,
		title: fmt.Sprintf("5. Scheduler simulation: %s endpoints, %s pools, %s jobs in bursts", thousands(len(s.eps)), thousands(len(s.pools)), thousands(o.schedJobs)),
		setup: fmt.Sprintf("In process, no HTTP (bench/sim.go, bench/scheduler.go): the real scheduler.Scheduler, core.Jobs on store/memq over Pebble in a temp dir, "+
			"wired as `gantry serve` wires them, over %d simulated pools (pool.Pool in memory; %d GPUs: %s; %d data centers; CUDA 11.8-12.8) and %d endpoints "+
			"(%d QUEUE_DELAY, %d REQUEST_COUNT; workers.min 0/1/2: %d/%d/%d, max 1-10; %d FLASHBOOT, %d PRIORITY_FLASHBOOT; %d pinned to data centers, %d with allowedCudaVersions; "+
			"1-3 pools each, gpu.count 1-8; seed %d). Each worker is a goroutine that boots for its endpoint's boot time (1-8 s), then long-polls core.Jobs.Take and "+
			"posts core.Jobs.Done after its endpoint's service time (20-500 ms per job). Simulated time runs %gx real time (a scaled core.Clock read by the engine, queues and "+
			"scheduler): one autoscaler tick per simulated second is one every %v of real time; every latency below is real (monotonic) time. "+
			"%s jobs arrive in %d bursts of %s, one every %v real (%v simulated), each on %d-%d random endpoints (jobs spread uniformly over them), submitted by %d goroutines; "+
			"submissions are %s. %d endpoints with idle workers are kept out of the bursts for the warm-worker probes.",
			len(s.pools), s.gpus(), strings.Join(typeList, ", "), len(simDataCenters), len(s.eps), qd, rc, mins[0], mins[1], mins[2], fb, pfb, dcs, cudas, o.schedSeed,
			o.schedSpeed, (time.Duration(float64(time.Second) / o.schedSpeed)).Round(time.Millisecond),
			thousands(o.schedJobs), o.schedBursts, thousands(o.schedJobs/max(o.schedBursts, 1)), o.schedBurstEvery, time.Duration(float64(o.schedBurstEvery)*o.schedSpeed),
			o.schedBurstMin, o.schedBurstMax, o.schedSubmitters, mode, r.probeEndpoints)}
	const tickTarget = 10 * time.Millisecond
	tickRow := func(label string, w, c durations, target bool) row {
		rw := row{metric: label, gantry: fmt.Sprintf("p50 %s, p99 **%s**, max %s (%d ticks); CPU of the ticking goroutine: p50 %s, p99 %s, max %s",
			us(w.p50), us(w.p99), us(w.max), w.n, us(c.p50), us(c.p99), us(c.max))}
		if target {
			rw.target = "p99 <= 10 ms"
			rw.verdict = b.schedVerdict("tick", w.n > 0 && w.p99 <= tickTarget, fmt.Sprintf("%.2fx the target", float64(w.p99)/float64(tickTarget)))
		}
		return rw
	}
	probeRow := func(label string, d durations, target bool) row {
		rw := row{metric: label, gantry: fmt.Sprintf("p50 %s, p99 **%s**, max %s (%d jobs)", us(d.p50), us(d.p99), us(d.max), d.n)}
		if target {
			rw.target = "p99 <= 1 ms"
			rw.verdict = b.schedVerdict("warm", d.n > 0 && d.p99 <= time.Millisecond, fmt.Sprintf("%.2fx the target", float64(d.p99)/float64(time.Millisecond)))
		}
		return rw
	}
	const placeTarget = 1e6
	placeRow := func(p placeResult, target bool) row {
		rw := row{metric: fmt.Sprintf("b. capacity reservations/s: Placer.Place + Reservation.Release from %d goroutines, GOMAXPROCS %d, %.0f%% of the GPUs held by standing reservations",
			p.procs, p.procs, 100*p.fill),
			gantry: fmt.Sprintf("**%s/s** (%s in %.1f s, %.2f CPU-s used of the %.1f the %d cores offered; %s Place calls found no room, %.1f%%)",
				thousands(int(p.rate())), thousands(int(p.ok)), p.elapsed.Seconds(), p.cpu.Seconds(), float64(p.procs)*p.elapsed.Seconds(), p.procs,
				thousands(int(p.failed)), 100*float64(p.failed)/float64(max(p.ok+p.failed, 1)))}
		if target {
			rw.target = ">= 1,000,000/s"
			rw.verdict = b.schedVerdict("place", p.rate() >= placeTarget, fmt.Sprintf("%.2fx the target", p.rate()/placeTarget))
		}
		return rw
	}
	loadOK := r.drained && r.submitErrs == 0 && r.doneErrs == 0
	sec.rows = append(sec.rows,
		tickRow(fmt.Sprintf("a. one autoscaler tick (Scheduler.Tick) over %s endpoints, during the burst load (wall time)", thousands(len(s.eps))), r.loadWall, r.loadCPU, true),
		tickRow("a. the same, after the load (idle workers parked, nothing queued)", r.quietWall, r.quietCPU, false),
		row{metric: fmt.Sprintf("a. the scheduling floor during the burst load: a goroutine beside the tick, locked to its thread, spinning %v of CPU every %v (no lock, no allocation)",
			o.schedFloorCPU, (time.Duration(float64(time.Second) / o.schedSpeed)).Round(time.Millisecond)),
			gantry: fmt.Sprintf("wall p50 %s, p99 **%s**, max %s (%d spins); CPU p50 %s, p99 %s", us(r.floorWall.p50), us(r.floorWall.p99), us(r.floorWall.max), r.floorWall.n, us(r.floorCPU.p50), us(r.floorCPU.p99))},
		row{metric: "a. the first tick (starts the workers.min workers)", gantry: fmt.Sprintf("%s; %d of %d workers.min workers polling %v later", us(r.firstTick), r.warmParked, r.minWanted, r.warmup.Round(time.Millisecond))},
		placeRow(r.place, true), placeRow(r.placeEmpty, false),
		probeRow(fmt.Sprintf("c. a job reaching an idle warm worker: Submit to the parked worker's Take returning it, one at a time, %d endpoints with parked workers", r.probeEndpoints), r.quietProbes, true),
		probeRow(fmt.Sprintf("c. the same during the burst load (a probe every %v to a random probe endpoint whose worker is parked; %s slots skipped as its worker was not)",
			o.schedProbeEvery, thousands(int(r.probeSkips))), r.loadProbes, false),
		row{metric: "c. of which core.Jobs.Submit itself, during the burst load", gantry: fmt.Sprintf("p50 %s, p99 %s, max %s", us(r.loadProbeSubmit.p50), us(r.loadProbeSubmit.p99), us(r.loadProbeSubmit.max))},
		row{metric: "load: jobs submitted / finished by the workers", gantry: fmt.Sprintf("%s / %s in %.1f s (submitted in %.1f s; %.0f jobs/s end to end); submit errors %d, Done errors %d",
			thousands(int(r.submitted)), thousands(int(r.completed)), r.loadTime.Seconds(), r.submitTime.Seconds(), float64(r.completed)/r.loadTime.Seconds(), r.submitErrs, r.doneErrs),
			target: "all done", verdict: b.verdict("scheduler", loadOK, fmt.Sprintf("%d not done", r.submitted-r.submitErrs-r.completed))},
		row{metric: "load: the Go runtime (runtime/metrics)", gantry: fmt.Sprintf("runnable goroutines waited for a CPU p50 %s, p99 %s, max %s (%s waits, /sched/latencies); GC stop-the-world pauses p99 %s, max %s (%d, /sched/pauses/total/gc)",
			us(r.schedP50), us(r.schedP99), us(r.schedMax), thousands(int(r.schedN)), us(r.gcP99), us(r.gcMax), r.gcN)},
		row{metric: "load: workers", gantry: fmt.Sprintf("%s started, %s suspended and %s resumed (FLASHBOOT); at most %s alive at once, %s of %s GPUs reserved at the peak sample",
			thousands(int(r.started)), thousands(int(r.suspends)), thousands(int(r.resumes)), thousands(int(r.maxAlive)), thousands(r.maxUsed), thousands(s.gpus()))},
	)
	sec.notes = append(sec.notes,
		fmt.Sprintf("How each figure is measured. (a) A goroutine locked to its OS thread calls Scheduler.Tick(now) every %v of real time (one simulated second, the serve cadence); "+
			"the wall time runs from just before the call to its return (time.Now, monotonic), and the CPU time is the thread's CLOCK_THREAD_CPUTIME_ID over the same call: "+
			"the gap between the two is time the tick waited for a CPU or a lock. Pool calls the tick starts run on their own goroutines, as in serve, and are not in the figure. "+
			"(b) scheduler.NewPlacer over the same %d pools, with %.0f%% of their GPUs held by standing single-GPU reservations on random pools (and again with none held); GOMAXPROCS set to %d (go test -cpu %d) and "+
			"%d goroutines each calling Place(want) and, when it succeeds, Release, walking the %s endpoints' wants (scheduler.WantOf) in order; "+
			"the rate is successful Place+Release pairs over the elapsed time (failed Place calls take their time too). "+
			"(c) The clock starts just before core.Jobs.Submit of a runsync probe job (its input carries the monotonic offset) on an endpoint whose worker is parked in core.Jobs.Take "+
			"(memq.Store.Parked > 0), and stops in the worker's goroutine right after Take returns the job, before anything else; this is Submit (store write, index, "+
			"memq.Store queueing the key and waking the parked worker, Scheduler.Demand through ListenAvailable) plus the wake-up and the take (the store write moving the job IN_PROGRESS).",
			(time.Duration(float64(time.Second)/o.schedSpeed)).Round(time.Millisecond), len(s.pools), 100*r.place.fill, r.place.procs, r.place.procs, r.place.procs, thousands(len(s.eps))),
		fmt.Sprintf("The scheduling floor: under the same load, half a tick interval after each tick, a second goroutine locked to its own OS thread spins on arithmetic until its thread's CPU clock "+
			"has advanced %v (-sched-floor-cpu; about the tick's median CPU under load) and records the wall time that took. It takes no lock and allocates nothing, so its wall time beyond its CPU time "+
			"is only waiting for a CPU (other threads of this process, the Go scheduler's preemption, GC pauses): a tick needing that much CPU cannot, on this machine under this load, return sooner.", o.schedFloorCPU),
		"The Go runtime row: runtime/metrics histograms read before and after the load phase; the figures are the upper bounds of the buckets holding the percentile. "+
			"A runnable goroutine (a woken worker, the ticking goroutine once preempted or woken from a lock) waits that long for one of the 2 CPUs; the tick's wall time includes such waits.",
		"Matching in-process benchmarks: `go test ./bench -run '^$' -bench 'BenchmarkPlacement|BenchmarkTick|BenchmarkWarmTake' -cpu 2` (bench/sim_test.go).")
	if r.stuck != "" {
		sec.notes = append(sec.notes, fmt.Sprintf("Not every job was done %v after the last burst: %s.", o.schedDrain, r.stuck))
	}
	if r.profile != "" {
		sec.notes = append(sec.notes, "The whole load phase ran under the CPU profiler (pprof, 100 Hz), which costs a little CPU; with -profile=false it does not.")
		b.schedProfile = r.profile
	}
	b.sections = append(b.sections, sec)
}

// schedVerdict is verdict for one of the scheduler scenario's figures (tick, place, warm),
// remembering which missed for the profiles.
func (b *bench) schedVerdict(key string, met bool, detail string) string {
	if !met {
		if b.schedMissed == nil {
			b.schedMissed = map[string]bool{}
		}
		b.schedMissed[key] = true
	}
	return b.verdict("scheduler", met, detail)
}

// thousands renders n with commas: 1,000,000.
func thousands(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
