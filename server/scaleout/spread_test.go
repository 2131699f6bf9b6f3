package scaleout_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
)

// metric returns the sum of the series of name on r's /metrics whose labels contain labels.
func metric(t *testing.T, r *server.Server, name, labels string) float64 {
	t.Helper()
	code, body := call(t, "GET", r.URL()+"/metrics", "", "")
	if code != 200 {
		t.Fatalf("/metrics on %s = %d", r.URL(), code)
	}
	re := regexp.MustCompile(`(?m)^` + name + `(\{[^}]*\})? (\S+)$`)
	var sum float64
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		if strings.Contains(m[1], labels) {
			v, _ := strconv.ParseFloat(m[2], 64)
			sum += v
		}
	}
	return sum
}

// TestWorkersSpreadOverReplicas: the leader hands its queue workers the replicas' addresses
// in turn, so that the workers' takes and results land on every replica, not all on the
// leader; when a replica stops, the worker sent there is stopped and replaced by one that
// reaches a replica still there, and jobs keep running.
func TestWorkersSpreadOverReplicas(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	rs := make([]*server.Server, 2)
	for i := range rs {
		cfg := server.Config{Store: url}
		cfg.Autoscaler.InitTimeout = 5
		rs[i] = servertest.New(t, cfg, server.Options{Tick: 100 * time.Millisecond, LeaseTTL: leaseTTL,
			Pools: []pool.Pool{servertest.LocalPool(8)}})
	}
	l := leader(t, rs)
	ld, fl := rs[l], rs[1-l]
	testkit.Eventually(t, "the leader to see both replicas on its roster", func() bool {
		return metric(t, ld, "gantry_replicas", "") == 2
	})
	key := servertest.Key(t, ld, "alice", core.ScopeAll)
	code, body := call(t, "POST", ld.URL()+"/v2/serverless", key,
		`{"name":"echo","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["local"]},"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"min":2,"max":2}}`)
	if code != 201 {
		t.Fatalf("create endpoint = %d %s; want 201", code, body)
	}
	var ep struct{ ID string }
	if err := json.Unmarshal([]byte(body), &ep); err != nil {
		t.Fatal(err)
	}
	ready := func() []core.WorkerInfo {
		var idle []core.WorkerInfo
		for _, w := range ld.Engine().Scheduler.EndpointWorkers(ep.ID) {
			if w.Status == "IDLE" || w.Status == "RUNNING" {
				idle = append(idle, w)
			}
		}
		return idle
	}
	testkit.Eventually(t, "two workers ready", func() bool { return len(ready()) == 2 })
	first := ready()

	runJobs := func(n int) {
		t.Helper()
		for i := range n {
			r := rs[i%2]
			if i%2 == 1 && fl == nil {
				r = ld
			}
			code, body := call(t, "POST", r.URL()+"/v2/"+ep.ID+"/runsync", key, `{"input":{"n":1}}`)
			if code != 200 || !strings.Contains(body, `"status":"COMPLETED"`) {
				t.Fatalf("runsync %d = %d %s; want 200 COMPLETED", i, code, body)
			}
		}
	}
	runJobs(20)
	for i, r := range rs {
		if takes, dones := metric(t, r, "gantry_requests_total", `operation="workerJobTake"`), metric(t, r, "gantry_requests_total", `operation="workerJobDone"`); takes == 0 || dones == 0 {
			t.Errorf("replica %d (leader %v) answered %v takes and %v results; want some: each worker reaches one replica", i, i == l, takes, dones)
		}
	}

	// The follower stops: it leaves the roster, and its worker is replaced.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := fl.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown of the follower = %v", err)
	}
	fl.Close()
	fl = nil
	testkit.Eventually(t, "the leader to see itself alone", func() bool { return metric(t, ld, "gantry_replicas", "") == 1 })
	testkit.Eventually(t, "the worker sent to the follower replaced", func() bool {
		now := ready()
		if len(now) != 2 {
			return false
		}
		kept := 0
		for _, w := range now {
			for _, f := range first {
				if w.ID == f.ID {
					kept++
				}
			}
		}
		return kept == 1
	})
	takes := metric(t, ld, "gantry_requests_total", `operation="workerJobTake"`)
	runJobs(10)
	if after := metric(t, ld, "gantry_requests_total", `operation="workerJobTake"`); after <= takes {
		t.Errorf("the leader's takes %v -> %v; want more: both workers reach it now", takes, after)
	}
}
