package main

// In-process benchmarks of the scheduler simulation (bench/sim.go), matching the figures of
// scenario "scheduler"; run them with -cpu 2 for the 2-core figures:
//
//	go test ./bench -run '^$' -bench 'BenchmarkPlacement|BenchmarkTick|BenchmarkWarmTake' -cpu 2
//	go test ./bench -run '^$' -bench '^BenchmarkTick$' -cpu 2 -cpuprofile /tmp/tick.prof -o /tmp/bench.test
//
// BENCH_SIM_ENDPOINTS and BENCH_SIM_POOLS size the world (default 10,000 and 1,000).

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/scheduler"
)

// simSizesFromEnv returns the world's size: the scenario's defaults unless the environment
// says otherwise.
func simSizesFromEnv() (endpoints, pools int) {
	endpoints, pools = 10000, 1000
	if v, err := strconv.Atoi(os.Getenv("BENCH_SIM_ENDPOINTS")); err == nil && v > 0 {
		endpoints = v
	}
	if v, err := strconv.Atoi(os.Getenv("BENCH_SIM_POOLS")); err == nil && v > 0 {
		pools = v
	}
	return endpoints, pools
}

// warmSimEngine starts the world and ticks (one simulated second apart) until the workers.min
// workers are parked; it stops when tb ends.
func warmSimEngine(tb testing.TB) *simEngine {
	tb.Helper()
	n, p := simSizesFromEnv()
	e, err := newSimEngine(genWorld(n, p, 1), tb.TempDir(), 10)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.close)
	e.probes.init()
	last, steady := -1, 0
	for deadline := time.Now().Add(30 * time.Second); steady < 10 && time.Now().Before(deadline); {
		e.tick()
		time.Sleep(e.clock.real(time.Second))
		if n := e.parked(); n == last && n > 0 {
			steady++
		} else {
			last, steady = n, 0
		}
	}
	if last <= 0 {
		tb.Fatalf("no worker parked after the warm-up")
	}
	return e
}

// BenchmarkTick is one autoscaler tick over the world at rest: every endpoint's workers.min
// workers idle and parked, nothing queued.
//
// With -cpu 1 the tick runs on the benchmark's own goroutine, locked to its thread, and
// cpu-ns/op is that thread's CPU time per tick: on a machine shared with other work it moves
// far less than ns/op, which counts the time the tick waited for a CPU.
func BenchmarkTick(b *testing.B) {
	e := warmSimEngine(b)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	c0 := threadCPU()
	for b.Loop() {
		e.tick()
	}
	if runtime.GOMAXPROCS(0) == 1 {
		b.ReportMetric(float64(threadCPU()-c0)/float64(b.N), "cpu-ns/op")
	}
	b.ReportMetric(float64(len(e.spec.eps)), "endpoints")
}

// BenchmarkPlacement is Placer.Place + Reservation.Release from GOMAXPROCS goroutines over the
// world's pools, walking the endpoints' wants, with none or half of the capacity held by
// standing reservations. ns/op is per Place call; reservations/s counts the successful ones.
func BenchmarkPlacement(b *testing.B) {
	n, p := simSizesFromEnv()
	spec := genWorld(n, p, 1)
	wants := spec.wants()
	for _, fill := range []float64{0, 0.5} {
		b.Run(fmt.Sprintf("held=%.0f%%", 100*fill), func(b *testing.B) {
			placer, err := scheduler.NewPlacer(spec.describedPools())
			if err != nil {
				b.Fatal(err)
			}
			prefill(placer, spec, fill, 1)
			var ok, seq atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1)*7919) % len(wants)
				var n int64
				for pb.Next() {
					if r, err := placer.Place(wants[i]); err == nil {
						r.Release()
						n++
					}
					if i++; i == len(wants) {
						i = 0
					}
				}
				ok.Add(n)
			})
			b.ReportMetric(float64(ok.Load())/b.Elapsed().Seconds(), "reservations/s")
			b.ReportMetric(100*float64(int64(b.N)-ok.Load())/float64(b.N), "%no-room")
		})
	}
}

// BenchmarkWarmTake is a job reaching an idle warm worker: core.Jobs.Submit (runsync, not
// synced) on an endpoint whose worker is parked in core.Jobs.Take, until that Take returns it;
// one job at a time, each on a random endpoint with a parked worker.
func BenchmarkWarmTake(b *testing.B) {
	e := warmSimEngine(b)
	var eps []int
	for i, ep := range e.spec.eps {
		if e.queues.Parked(ep.ID) > 0 {
			eps = append(eps, i)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	_, _ = e.probes.take()
	b.ResetTimer()
	for range b.N {
		for !submitProbe(e, &e.spec.eps[eps[r.IntN(len(eps))]]) {
		}
		select {
		case <-e.probes.signal:
		case <-time.After(10 * time.Second):
			b.Fatal("a probe was not taken within 10 s")
		}
	}
	b.StopTimer()
	lat, _ := e.probes.take()
	d := summarize(lat)
	b.ReportMetric(float64(d.p50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(d.p99.Nanoseconds()), "p99-ns")
}
