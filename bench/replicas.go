package main

// What each replica of a PostgreSQL pass did: its process's CPU and the worker-protocol
// requests it answered. It shows where the work of a pass lands (the leader, or every
// replica), which the pass's jobs/s alone cannot show on a machine with few cores.

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// replicaLoad is one replica's counters at an instant.
type replicaLoad struct {
	cpu   float64          // CPU-seconds of its process
	calls map[string]int64 // gantry_requests_total by operation, every status
}

// replicaOps are the operations a pass's share shows: the workers' and the clients'.
var replicaOps = []string{"workerJobTake", "workerJobDone", "workerPing", "runJob"}

// load reads g's counters now.
func (g *gantry) load() replicaLoad {
	l := replicaLoad{cpu: procCPUAll(g.cmd.Process.Pid, false), calls: map[string]int64{}}
	g.scrape(func(line string) bool {
		if rest, ok := strings.CutPrefix(line, "gantry_requests_total{"); ok {
			labels, val, _ := strings.Cut(rest, "} ")
			v, _ := strconv.ParseFloat(val, 64)
			l.calls[labelValue(labels, "operation")] += int64(v)
		}
		return true
	})
	return l
}

// scrape calls fn with each line of g's /metrics until fn returns false; an error reading it
// calls fn with nothing.
func (g *gantry) scrape(fn func(line string) bool) {
	resp, err := http.Get(g.base + "/metrics")
	if err != nil {
		return
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() && fn(sc.Text()) {
	}
}

// replicaShares says, for each replica (in start order), what it did between before and
// after, per job of n: CPU µs, and the share of each operation's calls it answered.
func replicaShares(before, after []replicaLoad, n int) string {
	total := map[string]int64{}
	for i := range after {
		for _, op := range replicaOps {
			total[op] += after[i].calls[op] - before[i].calls[op]
		}
	}
	var parts []string
	for i := range after {
		s := fmt.Sprintf("#%d: %.0f µs CPU/job", i, 1e6*(after[i].cpu-before[i].cpu)/float64(n))
		for _, op := range replicaOps {
			d := after[i].calls[op] - before[i].calls[op]
			if total[op] > 0 {
				s += fmt.Sprintf(", %s %.0f%%", op, 100*float64(d)/float64(total[op]))
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// waitReplicas waits until g's /metrics shows k replicas on its roster (gantry_replicas); a
// gantry without the gauge is taken as ready.
func (g *gantry) waitReplicas(k int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n, ok := g.gauge("gantry_replicas")
		if !ok || int(n) >= k {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v, %s sees %.0f replicas on its roster; want %d", timeout, g.name, n, k)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// gauge reads an unlabelled series from g's /metrics; ok is false when it is absent.
func (g *gantry) gauge(name string) (v float64, ok bool) {
	g.scrape(func(line string) bool {
		if val, found := strings.CutPrefix(line, name+" "); found {
			f, err := strconv.ParseFloat(val, 64)
			v, ok = f, err == nil
			return false
		}
		return true
	})
	return v, ok
}
