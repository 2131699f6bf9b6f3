package main

// In-process benchmarks of Gantry's job path, for CPU and heap profiles: the server `gantry
// serve` runs (package server, started by servertest on loopback), with echo workers run as
// goroutines by an in-process pool instead of processes. The bench command runs them with -cpuprofile for each
// scenario that misses its target; by hand:
//
//	go test ./bench -run '^$' -bench '^BenchmarkRun$' -benchtime 5s -cpuprofile /tmp/run.prof -o /tmp/bench.test
//	go tool pprof -top /tmp/bench.test /tmp/run.prof
//	BENCH_HEAPPROFILE=/tmp/heap.prof go test ./bench -run '^$' -bench '^BenchmarkQueuedMemory$' -benchtime 1x
//	go tool pprof -top -sample_index=inuse_space /tmp/heap.prof

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
	gantryserver "github.com/gantryhq/gantry/server" // bench has a type server: a process it runs
	"github.com/gantryhq/gantry/server/servertest"
)

// engine is Gantry's job path in process.
type engine struct {
	srv  *gantryserver.Server
	url  string
	jobs *core.Jobs
	pool *servertest.Pool
	key  string
}

// newEngine builds a whole server as `gantry serve` does (package server), with in-process
// echo workers, no rate limits and a 100 ms autoscaler tick; it stops when tb ends.
func newEngine(tb testing.TB) *engine {
	tb.Helper()
	pl := servertest.LocalPool(256)
	s := servertest.Build(tb, gantryserver.Config{Quota: &core.Quota{}}, // zero quota: unlimited, as --quota-* 0
		gantryserver.Options{Pools: []pool.Pool{pl}, Tick: 100 * time.Millisecond})
	s.Start()
	return &engine{srv: s, url: s.URL(), jobs: s.Jobs(), pool: pl, key: servertest.Key(tb, s, "bench", core.ScopeAll)}
}

// endpoint creates an echo endpoint through the management API and waits for min idle workers.
func (e *engine) endpoint(tb testing.TB, min, max int) string {
	tb.Helper()
	g := &gantry{server: &server{base: e.url}, key: e.key}
	id, err := g.createEndpoint("bench", min, max)
	if err != nil {
		tb.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for e.jobs.Health(tb.Context(), id).Idle < min {
		if time.Now().After(deadline) {
			tb.Fatalf("%d idle workers wanted; health %+v", min, e.jobs.Health(tb.Context(), id))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return id
}

// BenchmarkRun is scenario 1 in process: durable /run from 64 concurrent keep-alive clients to
// an endpoint with workers.max 0.
func BenchmarkRun(b *testing.B) {
	e := newEngine(b)
	ep := e.endpoint(b, 0, 0)
	url, body := e.url+"/v2/"+ep+"/run", jsonInput(100)
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		p := newPoster(url, e.key, body)
		defer p.close()
		for pb.Next() {
			if ok, err := p.do(); !ok || err != nil {
				b.Errorf("run = %s, %v", p.body, err)
				return
			}
		}
	})
}

// BenchmarkRunSync is scenario 2 in process: sequential /runsync with one warm echo worker.
func BenchmarkRunSync(b *testing.B) {
	e := newEngine(b)
	ep := e.endpoint(b, 1, 1)
	url, body := e.url+"/v2/"+ep+"/runsync", []byte(`{"input":{"echo":1}}`)
	p := newPoster(url, e.key, body)
	defer p.close()
	for range 100 {
		_, _ = p.do()
	}
	b.ResetTimer()
	for range b.N {
		if ok, err := p.do(); !ok || err != nil || !strings.Contains(string(p.body), "COMPLETED") {
			b.Fatalf("runsync = %s, %v", p.body, err)
		}
	}
}

// BenchmarkE2E is scenario 3 in process: b.N /run jobs from 64 clients through 64 echo
// workers, timed until the engine counts them all completed.
func BenchmarkE2E(b *testing.B) {
	e := newEngine(b)
	const workers, clients = 64, 64
	ep := e.endpoint(b, workers, workers)
	url, body := e.url+"/v2/"+ep+"/run", []byte(`{"input":{"echo":1}}`)
	base := e.jobs.Health(b.Context(), ep).Completed
	b.ResetTimer()
	start := time.Now()
	if r := burst(url, e.key, body, b.N, clients, nil); r.Errors > 0 {
		b.Fatalf("%d of %d submissions failed", r.Errors, b.N)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for e.jobs.Health(b.Context(), ep).Completed < base+int64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("not all jobs completed: %+v", e.jobs.Health(b.Context(), ep))
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
}

// BenchmarkQueuedMemory is scenario 4 in process: BENCH_MEM_JOBS (default 200,000) /run jobs
// with 1 KB inputs queued on an endpoint with workers.max 0; it reports the live heap per
// queued job and writes a heap profile to BENCH_HEAPPROFILE when set. Run it with -benchtime 1x.
func BenchmarkQueuedMemory(b *testing.B) {
	n := 200000
	if v, err := strconv.Atoi(os.Getenv("BENCH_MEM_JOBS")); err == nil && v > 0 {
		n = v
	}
	e := newEngine(b)
	ep := e.endpoint(b, 0, 0)
	url, body := e.url+"/v2/"+ep+"/run", jsonInput(1024)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for range b.N {
		r := burst(url, e.key, body, n, 64, nil)
		if r.Errors > 0 {
			b.Fatalf("%d of %d submissions failed", r.Errors, n)
		}
	}
	b.StopTimer()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	queued := e.jobs.Health(b.Context(), ep).InQueue
	b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(queued), "heap-B/queued-job")
	b.ReportMetric(float64(queued), "queued")
	if path := os.Getenv("BENCH_HEAPPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(os.Stderr, "heap profile of %d queued jobs: %s\n", queued, path)
	}
}
