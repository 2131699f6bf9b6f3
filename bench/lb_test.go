package main

import (
	"runtime"
	"testing"
	"time"
)

// In-process benchmarks of the lb scenario, for its CPU profile: a LOAD_BALANCER endpoint of
// the engine (engine_test.go, now with scheduler.Scheduler as its api.Config.Balancer) whose
// one worker is gantry/http-echo run in this process on a loopback port, and the scenario's
// GET from 64 keep-alive connections, through the proxy or straight to the worker:
//
//	go test ./bench -run '^$' -bench '^BenchmarkLB' -benchtime 5s
//	go test ./bench -run '^$' -bench '^BenchmarkLBProxy$' -benchtime 5s -cpuprofile /tmp/lb.prof -o /tmp/bench.test
//	go tool pprof -top /tmp/bench.test /tmp/lb.prof

// lbEndpoint creates the scenario's endpoint (one worker, never scaled) and waits until its
// worker is ready; it returns the endpoint and the worker's address.
func (e *engine) lbEndpoint(tb testing.TB) (id, addr string) {
	tb.Helper()
	g := &gantry{server: &server{base: e.url}, key: e.key}
	id, err := g.createLBEndpoint("bench-lb")
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := g.waitWorkers(id, 1, 30*time.Second); err != nil {
		tb.Fatal(err)
	}
	if addr = e.pool.LBAddr(id); addr == "" {
		tb.Fatalf("endpoint %s's worker has no address", id)
	}
	return id, addr
}

// benchGET sends the lb scenario's GET to url from 64 concurrent keep-alive connections.
func benchGET(b *testing.B, url, key string) {
	header := []string{"Accept: application/json", "Authorization: Bearer " + key, "X-Bench: lb"}
	p := newRequester("GET", url, header, nil)
	if ok, err := p.do(); !ok || err != nil {
		b.Fatalf("GET %s = %s, %v", url, p.body, err)
	}
	p.close()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		p := newRequester("GET", url, header, nil)
		defer p.close()
		for pb.Next() {
			if ok, err := p.do(); !ok || err != nil {
				b.Errorf("GET %s = %s, %v", url, p.body, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}

// BenchmarkLBProxy is the lb scenario's saturation pass through the proxy: GET {base}/lb/{id}/x.
func BenchmarkLBProxy(b *testing.B) {
	e := newEngine(b)
	id, _ := e.lbEndpoint(b)
	benchGET(b, e.url+"/lb/"+id+"/x", e.key)
}

// BenchmarkLBDirect is the same GET straight to the worker, for comparison.
func BenchmarkLBDirect(b *testing.B) {
	e := newEngine(b)
	_, addr := e.lbEndpoint(b)
	benchGET(b, "http://"+addr+"/x", e.key)
}
