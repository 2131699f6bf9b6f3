package kubecluster_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gantryhq/gantry/adapters/adaptertest"
	kube "github.com/gantryhq/gantry/adapters/kubernetes"
	"github.com/gantryhq/gantry/adapters/kubernetes/kubecluster"
	"github.com/gantryhq/gantry/pool"
)

// BenchResult is what TestBench writes for `go run ./bench -only kubernetes`: rows of the
// report's table, the setup and notes.
type BenchResult struct {
	Setup string     `json:"setup"`
	Rows  [][]string `json:"rows"` // metric, measured, target
	Notes []string   `json:"notes"`
}

// TestBench measures the Kubernetes pool on the in-process cluster when GANTRY_KUBE_BENCH
// names the file to write its figures to (`make bench BENCHFLAGS="-only kubernetes"`):
//  1. one worker at a time: from the scale-up decision (Start called) to the pod created, to
//     the pod bound by kube-scheduler, to the test kubelet's process start, to the worker's
//     first poll of Gantry;
//  2. a burst of GANTRY_KUBE_BENCH_WORKERS (500) workers across 50 fake nodes with processless
//     pods: the time until all are running, the pool's API requests per worker at its default
//     QPS and burst, and exit-detection latency from the watch.
func TestBench(t *testing.T) {
	out := os.Getenv("GANTRY_KUBE_BENCH")
	if out == "" {
		t.Skip("set GANTRY_KUBE_BENCH=<file> to measure (make bench BENCHFLAGS=\"-only kubernetes\")")
	}
	workers := 500
	if n, err := fmt.Sscan(cmp.Or(os.Getenv("GANTRY_KUBE_BENCH_WORKERS"), "500"), &workers); n != 1 || err != nil || workers < 50 {
		t.Fatalf("GANTRY_KUBE_BENCH_WORKERS: want a number >= 50")
	}
	c := kubecluster.Start(t)
	res := BenchResult{Setup: fmt.Sprintf("kube-apiserver and kube-scheduler of k8s.io/kubernetes v1.37.2 on embedded etcd, in the test process "+
		"(adapters/kubernetes/kubecluster); the test kubelet runs pods on fake nodes. The pool's client has Gantry's defaults: "+
		"QPS %d, burst %d.", kube.DefaultQPS, kube.DefaultBurst)}
	benchLatency(t, c, &res)
	benchBurst(t, c, &res, workers, kube.DefaultQPS, kube.DefaultBurst)
	benchBurst(t, c, &res, workers, 4*kube.DefaultQPS, 4*kube.DefaultBurst)
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", b)
}

// podTimes records, from a watch, when each pod was first seen and first seen bound.
type podTimes struct {
	mu             sync.Mutex
	created, bound map[string]time.Time
}

func watchPods(t *testing.T, c *kubecluster.Cluster, selector string) *podTimes {
	pt := &podTimes{created: map[string]time.Time{}, bound: map[string]time.Time{}}
	f := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	inf := f.Core().V1().Pods().Informer()
	see := func(o any) {
		pod := o.(*corev1.Pod)
		now := time.Now()
		pt.mu.Lock()
		defer pt.mu.Unlock()
		if _, ok := pt.created[pod.Name]; !ok {
			pt.created[pod.Name] = now
		}
		if _, ok := pt.bound[pod.Name]; !ok && pod.Spec.NodeName != "" {
			pt.bound[pod.Name] = now
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); f.Shutdown() })
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return pt
}

func (pt *podTimes) get(pod string) (created, bound time.Time) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return pt.created[pod], pt.bound[pod]
}

// benchLatency starts workers one at a time, each Gantry's echo worker polling a stand-in for
// Gantry's job-take URL that answers "no job".
func benchLatency(t *testing.T, c *kubecluster.Cluster, res *BenchResult) {
	const samples = 20
	k := kubelet(t, c)
	addNodes(t, k, "lat", 2, 8)
	var mu sync.Mutex
	polled := map[string]time.Time{}
	gantry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(r.URL.Path, "/") // /v2/ep/job-take/{worker}
		if len(parts) == 5 && parts[3] == "job-take" {
			mu.Lock()
			if _, ok := polled[parts[4]]; !ok {
				polled[parts[4]] = time.Now()
			}
			mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer gantry.Close()
	p := newPool(t, c, "lat", nil)
	pt := watchPods(t, c, kube.LabelPool+"="+p.Describe().ID)
	rec := &adaptertest.Recorder{}
	var create, bind, proc, poll, total []time.Duration
	for i := range samples {
		id := fmt.Sprintf("lat%02d", i)
		base := gantry.URL + "/v2/ep"
		env := map[string]string{"RUNPOD_WEBHOOK_GET_JOB": base + "/job-take/" + id + "?gpu=x", "RUNPOD_WEBHOOK_POST_OUTPUT": base + "/job-done/" + id + "/$ID?gpu=x",
			"RUNPOD_WEBHOOK_PING": base + "/ping/" + id + "?gpu=x", "RUNPOD_WEBHOOK_POST_STREAM": base + "/job-stream/" + id + "/$ID?gpu=x", "RUNPOD_POD_ID": id, "RUNPOD_AI_API_KEY": "x", "RUNPOD_ENDPOINT_ID": "ep",
			"RUNPOD_PING_INTERVAL": "10000"}
		t0 := time.Now()
		if err := p.Start(context.Background(), pool.WorkerSpec{ID: id, Endpoint: "ep", Image: echoImage, GPUCount: 1, Env: env, Report: rec.Report}); err != nil {
			t.Fatal(err)
		}
		created := time.Now() // the API server acknowledged the pod
		var first time.Time
		deadline := time.Now().Add(wait)
		for first.IsZero() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
			for _, e := range rec.Events(id) {
				if e.State == pool.WorkerExited {
					t.Fatalf("worker %s exited before polling: %v", id, e.Err)
				}
			}
			mu.Lock()
			first = polled[id]
			mu.Unlock()
		}
		if first.IsZero() {
			t.Fatalf("worker %s never polled", id)
		}
		_, bound := pt.get(kube.PodName(id))
		started := k.Started(namespace, kube.PodName(id))
		create, bind, proc = append(create, created.Sub(t0)), append(bind, bound.Sub(t0)), append(proc, started.Sub(t0))
		poll, total = append(poll, first.Sub(started)), append(total, first.Sub(t0))
		if err := p.Stop(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		rec.Wait(t, id, pool.WorkerExited, wait)
	}
	q := func(d []time.Duration) string {
		slices.Sort(d)
		return fmt.Sprintf("%s / %s", d[len(d)/2].Round(10*time.Microsecond), d[len(d)*95/100].Round(10*time.Microsecond))
	}
	res.Rows = append(res.Rows,
		[]string{fmt.Sprintf("one worker (%d samples), p50 / p95: decision to pod created (API server acknowledged)", samples), q(create), ""},
		[]string{"decision to pod bound (kube-scheduler, seen by a watch)", q(bind), ""},
		[]string{"decision to the test kubelet's process start", q(proc), ""},
		[]string{"process start to the worker's first poll (the test kubelet's own part: a Go worker process starting)", q(poll), ""},
		[]string{"decision to the worker's first poll", q(total), ""})
}

// countingTransport counts the requests of a client.
type countingTransport struct {
	n    *atomic.Int64
	next http.RoundTripper
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// benchBurst starts n processless workers at once across 50 nodes, then ends a tenth of them
// with a fault and stops the rest.
func benchBurst(t *testing.T, c *kubecluster.Cluster, res *BenchResult, n int, qps float32, burst int) {
	k := kubecluster.NewKubelet(t, c, kubecluster.KubeletConfig{NoProcess: true})
	group := fmt.Sprintf("burst%d", int(qps))
	const nodes = 50
	addNodes(t, k, group, nodes, (n+nodes-1)/nodes)
	var requests atomic.Int64
	client, err := c.ClientFor(qps, burst, func(rt http.RoundTripper) http.RoundTripper { return countingTransport{&requests, rt} })
	if err != nil {
		t.Fatal(err)
	}
	p := newPool(t, c, group, func(cfg *kube.Config) {
		cfg.Client = client
		cfg.Log = slog.New(slog.DiscardHandler)
	})
	testWaitCapacity(t, p, n)
	before := requests.Load()
	rec := &adaptertest.Recorder{}
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := range n { // the scheduler starts each placement on its own goroutine
		wg.Go(func() {
			id := fmt.Sprintf("%s-%03d", group, i)
			if err := p.Start(context.Background(), pool.WorkerSpec{ID: id, Endpoint: "ep", Image: testImage, GPUCount: 1, Report: rec.Report}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	created := time.Since(t0)
	var last time.Time
	for i := range n {
		e := rec.Wait(t, fmt.Sprintf("%s-%03d", group, i), pool.WorkerRunning, 5*time.Minute)
		if e.At.After(last) {
			last = e.At
		}
	}
	all := last.Sub(t0)
	startReqs := requests.Load() - before

	// Exit detection: a tenth of the pods evicted; from the kubelet's status write to the pool's
	// WorkerExited.
	var detect []time.Duration
	faulted := n / 10
	for i := range faulted {
		if err := k.Evict(namespace, kube.PodName(fmt.Sprintf("%s-%03d", group, i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range faulted {
		pod := kube.PodName(fmt.Sprintf("%s-%03d", group, i))
		e := rec.Wait(t, fmt.Sprintf("%s-%03d", group, i), pool.WorkerExited, time.Minute)
		detect = append(detect, e.At.Sub(k.Ended(namespace, pod)))
	}
	t1 := time.Now()
	for i := faulted; i < n; i++ {
		wg.Go(func() {
			if err := p.Stop(context.Background(), fmt.Sprintf("%s-%03d", group, i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i := faulted; i < n; i++ {
		rec.Wait(t, fmt.Sprintf("%s-%03d", group, i), pool.WorkerExited, 5*time.Minute)
	}
	stopped := time.Since(t1)
	total := requests.Load() - before
	slices.Sort(detect)
	det := "none measured"
	if len(detect) > 0 {
		det = fmt.Sprintf("%s / %s / %s (%d pods)", detect[len(detect)/2].Round(10*time.Microsecond),
			detect[len(detect)*95/100].Round(10*time.Microsecond), detect[len(detect)-1].Round(10*time.Microsecond), len(detect))
	}
	res.Rows = append(res.Rows,
		[]string{fmt.Sprintf("burst of %d workers on %d nodes, client QPS %.0f burst %d: all Start calls returned", n, nodes, qps, burst), fmt.Sprintf("%.2f s", created.Seconds()), ""},
		[]string{"… all workers running (Ready, seen by the pool's watch)", fmt.Sprintf("%.2f s", all.Seconds()), ""},
		[]string{"… API requests of the pool per worker while starting", fmt.Sprintf("%.2f (%d)", float64(startReqs)/float64(n), startReqs), "no polling: about 1 (the create)"},
		[]string{"… exit detection from the kubelet's status write to WorkerExited, p50 / p95 / max", det, ""},
		[]string{"… stopping the rest: all WorkerExited", fmt.Sprintf("%.2f s", stopped.Seconds()), ""},
		[]string{"… API requests of the pool per worker, start to exit", fmt.Sprintf("%.2f (%d)", float64(total)/float64(n), total), "about 2 (create, delete)"})
}

func testWaitCapacity(t *testing.T, p *kube.Pool, n int) {
	deadline := time.Now().Add(wait)
	for p.Capacity() < n {
		if time.Now().After(deadline) {
			t.Fatalf("capacity %d; want %d", p.Capacity(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
