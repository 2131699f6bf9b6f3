package docker

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gantryhq/gantry/adapters/adaptertest"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// BenchmarkColdStart measures how long a worker takes from the pool's call to its first HTTP
// answer: a fresh container (Start), and a suspended one brought back (Resume) in each suspend
// mode. The test worker is a static Go binary FROM scratch serving on $PORT with host
// networking, so the figures are the engine's and the adapter's, not a model's loading time:
//
//	go test ./adapters/docker -run '^$' -bench ColdStart -benchtime 20x
func BenchmarkColdStart(b *testing.B) {
	requireEngine(b)
	b.Run("start", func(b *testing.B) {
		p, rec := benchPool(b, SuspendPause)
		for i := range b.N {
			spec := benchSpec(rec, i)
			began := time.Now()
			if err := p.Start(context.Background(), spec); err != nil {
				b.Fatal(err)
			}
			addr := rec.Wait(b, spec.ID, pool.WorkerRunning, waitTimeout).Addrs[80]
			firstAnswer(b, addr, began)
			b.StopTimer()
			_ = p.Stop(context.Background(), spec.ID)
			rec.Wait(b, spec.ID, pool.WorkerExited, waitTimeout)
			b.StartTimer()
		}
	})
	for _, mode := range []SuspendMode{SuspendPause, SuspendStop} {
		b.Run("resume-"+string(mode), func(b *testing.B) {
			p, rec := benchPool(b, mode)
			spec := benchSpec(rec, 0)
			if err := p.Start(context.Background(), spec); err != nil {
				b.Fatal(err)
			}
			addr := rec.Wait(b, spec.ID, pool.WorkerRunning, waitTimeout).Addrs[80]
			firstAnswer(b, addr, time.Now())
			b.Cleanup(func() {
				_ = p.Stop(context.Background(), spec.ID)
				rec.Wait(b, spec.ID, pool.WorkerExited, waitTimeout)
			})
			var suspend time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				began := time.Now()
				if err := p.Suspend(context.Background(), spec.ID); err != nil {
					b.Fatal(err)
				}
				suspend += time.Since(began)
				b.StartTimer()
				began = time.Now()
				if err := p.Resume(context.Background(), spec.ID); err != nil {
					b.Fatal(err)
				}
				firstAnswer(b, addr, began)
			}
			b.ReportMetric(float64(suspend.Microseconds())/1000/float64(b.N), "suspend-ms/op")
		})
	}
}

func benchPool(b *testing.B, mode SuspendMode) (*Pool, *adaptertest.Recorder) {
	b.Helper()
	p, err := New(context.Background(), Config{Pool: core.PoolInfo{ID: testPoolID("bench"), GPUType: "CPU", GPUs: 1, CPU: true},
		Suspend: mode, StopGrace: testGrace})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p, &adaptertest.Recorder{}
}

func benchSpec(rec *adaptertest.Recorder, i int) pool.WorkerSpec {
	id := "bench-" + strconv.Itoa(i)
	return pool.WorkerSpec{ID: id, Endpoint: "ep-bench", Image: engine.image, Args: "serves",
		PortEnv: map[string]int{"PORT": 80}, Env: map[string]string{"RUNPOD_POD_ID": id}, Report: rec.Report}
}

// firstAnswer polls http://addr/ every millisecond until it answers 200, failing the benchmark
// when it does not within waitTimeout of began.
func firstAnswer(b *testing.B, addr string, began time.Time) {
	b.Helper()
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := began.Add(waitTimeout)
	for {
		resp, err := c.Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("no answer from %s within %v: %v", addr, waitTimeout, err)
		}
		time.Sleep(time.Millisecond)
	}
}
