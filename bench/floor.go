package main

// The end-to-end floor: the least a server can do to move jobs from clients through long-polling
// worker processes, measured with the same clients as Gantry and as many worker processes (the
// bench's own echo worker).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gantryhq/gantry/core"
)

// floorJob is a queued job of the queue floor.
type floorJob struct {
	id    string
	input json.RawMessage
}

// queueFloor is an in-memory job queue that speaks the part of the worker protocol the
// built-in workers use: /run queues the input (no disk, no keys, no validation beyond reading
// the "input" field), job-take long-polls for one job, job-done counts it, job-stop and ping
// answer at once. It is the ceiling of any platform's end-to-end rate through the same workers.
type queueFloor struct {
	jobs          chan floorJob
	polling, done atomic.Int64
	// st, when open, makes it the durable queue floor: each job's input and record are stored
	// synced at /run, its record unsynced at job-take and synced at job-done, as Gantry stores
	// a job.
	st floorStore
}

func (q *queueFloor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case strings.HasSuffix(p, "/run"):
		var req struct {
			Input json.RawMessage `json:"input"`
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 10<<20))
		if err == nil {
			err = json.Unmarshal(body, &req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id := bareID()
		if !q.st.put(w, id, core.InQueue, req.Input, true) {
			return
		}
		q.jobs <- floorJob{id: id, input: req.Input}
		bareAnswer(w, r, id)
	case strings.Contains(p, "/job-take/"):
		q.polling.Add(1)
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		select {
		case j := <-q.jobs:
			q.polling.Add(-1)
			if !q.st.put(w, j.id, core.InProgress, nil, false) {
				return
			}
			out, _ := json.Marshal(map[string]any{"id": j.id, "input": j.input})
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(out)
		case <-t.C:
			q.polling.Add(-1)
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
			q.polling.Add(-1)
		}
	case strings.Contains(p, "/job-done/"):
		_, _ = io.Copy(io.Discard, r.Body)
		id := p[strings.LastIndexByte(p, '/')+1:]
		if !q.st.put(w, id, core.Completed, nil, true) {
			return
		}
		q.done.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
	case strings.Contains(p, "/job-stop/"):
		// Nothing to stop: hold the long poll as a server would, so that workers do not spin.
		select {
		case <-time.After(30 * time.Second):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"jobsToStop":[]}`)
	case strings.HasSuffix(p, "/floor-stats"):
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"polling":%d,"done":%d}`, q.polling.Load(), q.done.Load())
	default: // ping
		w.WriteHeader(http.StatusOK)
	}
}

// serveQueueFloor serves the queue floor on 127.0.0.1:0 and starts n floor worker processes
// against it (this binary's -floor-worker: an echo worker that is the bench's own code, so that
// a change to Gantry's worker does not move the floor), with the environment the process
// adapter gives a built-in worker (GOMAXPROCS=1, the RunPod variables). The workers are its
// children, so that their CPU time is counted as gantry serve's workers' is.
func serveQueueFloor(n int, durable string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	st, err := openFloorStore(durable)
	if err != nil {
		return err
	}
	defer st.close()
	q := &queueFloor{jobs: make(chan floorJob, 4<<20), st: st}
	srv := &http.Server{Handler: q, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	base := "http://" + ln.Addr().String() + "/v2/floor"
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	for i := range n {
		id := "floor-w" + strconv.Itoa(i)
		c := exec.Command(self, floorWorkerFlag)
		c.Env = []string{"PATH=" + os.Getenv("PATH"), "GOMAXPROCS=1",
			"RUNPOD_WEBHOOK_GET_JOB=" + base + "/job-take/" + id + "?gpu=CPU",
			"RUNPOD_WEBHOOK_POST_OUTPUT=" + base + "/job-done/" + id + "/$ID?gpu=CPU",
			"RUNPOD_WEBHOOK_POST_STREAM=" + base + "/job-stream/" + id + "/$ID?gpu=CPU",
			"RUNPOD_WEBHOOK_PING=" + base + "/ping/" + id + "?gpu=CPU",
			"RUNPOD_POD_ID=" + id, "RUNPOD_AI_API_KEY=floor", "RUNPOD_ENDPOINT_ID=floor",
			"RUNPOD_PING_INTERVAL=10000"}
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			return fmt.Errorf("starting worker %d: %w", i, err)
		}
		cmds = append(cmds, c)
	}
	fmt.Printf("bare handler listening on http://%s\n", ln.Addr())
	ctx, stop := signalContext()
	defer stop()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// floorStats reads the queue floor's counters.
func floorStats(c *http.Client, base string) (polling, done int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v2/floor/floor-stats", nil)
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	var s struct{ Polling, Done int64 }
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return 0, 0, err
	}
	return s.Polling, s.Done, nil
}

// e2eFloor runs the e2e jobs through the queue floor and its worker processes, as e2ePass runs
// them through Gantry; durable stores them as Gantry does.
func (b *bench) e2eFloor(durable bool) (e2eResult, error) {
	r := e2eResult{concurrency: 1}
	n, w := b.o.e2eJobs, b.o.e2eWorkers
	name, args := "queue floor", []string{"-bare-queue-workers", strconv.Itoa(w), "-gantry", b.o.gantryBin}
	if durable {
		name, args = "durable queue floor", append(args, "-bare-durable", filepath.Join(b.tmp, "e2e-floor-data"))
	}
	s, err := b.startPeer(name, "e2e", args...)
	if err != nil {
		return r, err
	}
	defer s.stop()
	c := newClient(1)
	start := time.Now()
	for {
		polling, _, err := floorStats(c, s.base)
		if err == nil && polling >= int64(w) {
			break
		}
		if time.Since(start) > 3*time.Minute {
			return r, fmt.Errorf("queue floor: %d of %d workers polling after %v (err %v)", polling, w, time.Since(start).Round(time.Second), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.warm = time.Since(start)
	logf("e2e %s: %d workers polling after %v; submitting %d jobs from %d clients", name, w, r.warm.Round(time.Millisecond), n, b.o.e2eClients)
	cpu0 := s.cpu()
	workersCPU0, _ := s.childrenCPU()
	start = time.Now()
	finished := make(chan error, 1)
	go func() {
		deadline := start.Add(max(3*time.Minute, time.Duration(n)*2*time.Millisecond))
		for {
			time.Sleep(20 * time.Millisecond)
			_, done, err := floorStats(c, s.base)
			if err == nil && done >= int64(n) {
				r.elapsed = time.Since(start)
				r.h.Jobs.Completed = done
				finished <- nil
				return
			}
			if time.Now().After(deadline) {
				finished <- fmt.Errorf("queue floor: %d of %d jobs done after %v (err %v)", done, n, time.Since(start).Round(time.Second), err)
				return
			}
		}
	}()
	r.sub = burst(s.base+"/v2/floor/run", "floor", e2eBody, n, b.o.e2eClients, nil)
	if err := <-finished; err != nil {
		return r, err
	}
	r.serveCPU = s.cpu() - cpu0
	r.workersCPU, r.nWorkers = s.childrenCPU()
	r.workersCPU -= workersCPU0
	logf("e2e %s: %d done in %v: %.0f jobs/s", name, r.h.Jobs.Completed, r.elapsed.Round(time.Millisecond), r.jobsPerSec())
	return r, nil
}
