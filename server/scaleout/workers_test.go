package scaleout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	neturl "net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
	"github.com/gantryhq/gantry/worker"
)

// redirectPool is the in-process pool whose workers reach another replica than the one that
// started them: their take, done, stream and ping URLs name the server at *to (its base URL),
// as when the workers' URL is a load balancer and their requests land on a replica that does
// not lead.
type redirectPool struct {
	*servertest.Pool
	to *atomic.Pointer[string]
}

func (p redirectPool) Start(ctx context.Context, spec pool.WorkerSpec) error {
	spec.Env = maps.Clone(spec.Env)
	for _, k := range []string{worker.EnvTakeURL, worker.EnvDoneURL, worker.EnvStreamURL, worker.EnvPingURL} {
		if v := spec.Env[k]; v != "" {
			_, rest, _ := strings.Cut(v, "://")
			_, path, _ := strings.Cut(rest, "/")
			spec.Env[k] = *p.to.Load() + "/" + path
		}
	}
	return p.Pool.Start(ctx, spec)
}

// workerReplicas starts two replicas on one fresh database whose workers reach the server at
// *to; they tick often, and a worker not ready within 3 s of its start is stopped.
func workerReplicas(t *testing.T, to *atomic.Pointer[string]) []*server.Server {
	t.Helper()
	url := pgtest.URL(t)
	rs := make([]*server.Server, 2)
	for i := range rs {
		cfg := server.Config{Store: url}
		cfg.Autoscaler.InitTimeout = 3
		rs[i] = servertest.New(t, cfg, server.Options{Tick: 100 * time.Millisecond, LeaseTTL: leaseTTL,
			Pools: []pool.Pool{redirectPool{servertest.LocalPool(8), to}}})
	}
	return rs
}

// createEcho creates a gantry-echo endpoint of at most one worker, retired after 2 s idle,
// through r and returns its id.
func createEcho(t *testing.T, r *server.Server, key string) string {
	t.Helper()
	code, body := call(t, "POST", r.URL()+"/v2/serverless", key,
		`{"name":"echo","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["local"]},"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"max":1,"idleTimeout":2}}`)
	if code != 201 {
		t.Fatalf("create endpoint = %d %s; want 201", code, body)
	}
	var ep struct{ ID string }
	if err := json.Unmarshal([]byte(body), &ep); err != nil {
		t.Fatal(err)
	}
	return ep.ID
}

// health returns the workers object of an endpoint's /health on r.
func health(t *testing.T, r *server.Server, key, ep string) map[string]any {
	t.Helper()
	code, body := call(t, "GET", r.URL()+"/v2/"+ep+"/health", key, "")
	if code != 200 {
		t.Fatalf("health on %s = %d %s; want 200", r.URL(), code, body)
	}
	var h struct{ Workers map[string]any }
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatal(err)
	}
	return h.Workers
}

// TestWorkerThroughFollower: a worker the leader started whose every request lands on the
// follower (a load balancer in front of the replicas) becomes ready without reaching its init
// timeout, runs jobs submitted through either replica, is not retired past its idle timeout
// while it runs a job it took through the follower, and is retired once idle; /health on the
// follower shows the same worker figures as the leader's all along.
func TestWorkerThroughFollower(t *testing.T) {
	t.Parallel()
	var to atomic.Pointer[string]
	rs := workerReplicas(t, &to)
	l := leader(t, rs)
	ld, fl := rs[l], rs[1-l]
	followerURL := fl.URL()
	to.Store(&followerURL)
	key := servertest.Key(t, fl, "alice", core.ScopeAll)
	ep := struct{ ID string }{createEcho(t, fl, key)}
	sameHealth := func(what string) {
		t.Helper()
		testkit.Eventually(t, what+", the same on both replicas", func() bool {
			a, b := health(t, ld, key, ep.ID), health(t, fl, key, ep.ID)
			return maps.Equal(a, b)
		})
	}

	// A job submitted to the leader is run by the worker the leader started, through the
	// follower; the leader sees it ready at once, not at its init timeout.
	code, body := call(t, "POST", ld.URL()+"/v2/"+ep.ID+"/runsync", key, `{"input":{"n":1}}`)
	if code != 200 || !strings.Contains(body, `"status":"COMPLETED"`) {
		t.Fatalf("runsync on the leader = %d %s; want 200 COMPLETED", code, body)
	}
	var ws []core.WorkerInfo
	testkit.Eventually(t, "the leader to see its worker ready", func() bool {
		ws = ld.Engine().Scheduler.EndpointWorkers(ep.ID)
		return len(ws) == 1 && (ws[0].Status == "IDLE" || ws[0].Status == "RUNNING")
	})
	id := ws[0].ID
	if took := time.Since(ws[0].StartedAt); took > 3*time.Second {
		t.Errorf("the worker became ready %v after its start; want before its init timeout", took)
	}

	// A job submitted to the follower outlives the idle timeout (2 s): the worker holds it,
	// taken through the follower, and the leader keeps the worker.
	code, body = call(t, "POST", fl.URL()+"/v2/"+ep.ID+"/run", key, `{"input":{"sleep_ms":4000}}`)
	if code != 200 {
		t.Fatalf("run on the follower = %d %s; want 200", code, body)
	}
	var job struct{ ID string }
	if err := json.Unmarshal([]byte(body), &job); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the leader to see its worker running the job", func() bool {
		ws = ld.Engine().Scheduler.EndpointWorkers(ep.ID)
		return len(ws) == 1 && ws[0].Status == "RUNNING"
	})
	sameHealth("one worker running")
	if w := health(t, fl, key, ep.ID); w["running"] != 1.0 || w["unhealthy"] != 0.0 {
		t.Errorf("follower's /health workers while the job runs = %v; want 1 running, none unhealthy", w)
	}
	testkit.Eventually(t, "the job to complete", func() bool {
		_, body := call(t, "GET", ld.URL()+"/v2/"+ep.ID+"/status/"+job.ID, key, "")
		return strings.Contains(body, `"status":"COMPLETED"`)
	})
	_, body = call(t, "GET", fl.URL()+"/v2/"+ep.ID+"/status/"+job.ID, key, "")
	if !strings.Contains(body, `"workerId":"`+id+`"`) || !strings.Contains(body, `"retries":0`) {
		t.Errorf("the long job = %s; want run once, by worker %s", body, id)
	}

	// Idle past its idle timeout, the worker is retired; both replicas say so.
	testkit.Eventually(t, "the idle worker to be retired", func() bool {
		ws = ld.Engine().Scheduler.EndpointWorkers(ep.ID)
		return len(ws) == 0 || ws[0].Status == "EXITED"
	})
	sameHealth("no worker")
	if w := health(t, fl, key, ep.ID); w["idle"] != 0.0 || w["running"] != 0.0 || w["unhealthy"] != 0.0 {
		t.Errorf("follower's /health workers after the retirement = %v; want none", w)
	}
}

// TestWorkerAlternatingReplicas: a load balancer in front of the replicas sends a worker's
// takes to each in turn and each result to the other replica than its take's, so that it takes
// jobs through both and posts their results through the other. Every job runs once; once idle the worker is retired (the leader does not count a job
// it handed out and that ended through the follower as still held), and /health agrees.
func TestWorkerAlternatingReplicas(t *testing.T) {
	t.Parallel()
	var to atomic.Pointer[string]
	rs := workerReplicas(t, &to)
	var turn, hits [2]atomic.Int64
	proxies := [2]*httputil.ReverseProxy{}
	for i, r := range rs {
		u, err := neturl.Parse(r.URL())
		if err != nil {
			t.Fatal(err)
		}
		proxies[i] = httputil.NewSingleHostReverseProxy(u)
		proxies[i].ErrorLog = log.New(io.Discard, "", 0) // polls cut short when the worker stops
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Takes go to each replica in turn, and each result to the other replica than the last
	// take's; the rest (pings, job-stop) in turn.
	lb := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var i int64
		switch {
		case strings.Contains(req.URL.Path, "/job-take/"):
			i = turn[0].Add(1) % 2
		case strings.Contains(req.URL.Path, "/job-done/"):
			i = (turn[0].Load() + 1) % 2
		default:
			i = turn[1].Add(1) % 2
		}
		hits[i].Add(1)
		proxies[i].ServeHTTP(w, req)
	})}
	go lb.Serve(ln)
	t.Cleanup(func() { lb.Close() })
	lbURL := "http://" + ln.Addr().String()
	to.Store(&lbURL)

	l := leader(t, rs)
	ld, fl := rs[l], rs[1-l]
	key := servertest.Key(t, ld, "alice", core.ScopeAll)
	ep := createEcho(t, ld, key)
	for i := range 6 {
		r := rs[i%2]
		code, body := call(t, "POST", r.URL()+"/v2/"+ep+"/runsync", key, fmt.Sprintf(`{"input":{"n":%d}}`, i))
		if code != 200 || !strings.Contains(body, `"status":"COMPLETED"`) || !strings.Contains(body, `"retries":0`) {
			t.Fatalf("runsync %d = %d %s; want 200 COMPLETED, run once", i, code, body)
		}
	}
	if hits[0].Load() == 0 || hits[1].Load() == 0 {
		t.Fatalf("worker requests by replica = %d, %d; want some on each", hits[0].Load(), hits[1].Load())
	}
	testkit.Eventually(t, "the idle worker to be retired", func() bool {
		ws := ld.Engine().Scheduler.EndpointWorkers(ep)
		return len(ws) == 0 || ws[0].Status == "EXITED"
	})
	if ws := ld.Engine().Scheduler.EndpointWorkers(ep); len(ws) != 1 || ws[0].Error != "" {
		t.Errorf("the leader's workers = %+v; want the one worker, exited without an error", ws)
	}
	testkit.Eventually(t, "/health to show no worker on both replicas", func() bool {
		a, b := health(t, ld, key, ep), health(t, fl, key, ep)
		return maps.Equal(a, b) && a["idle"] == 0.0 && a["running"] == 0.0 && a["unhealthy"] == 0.0
	})
}
