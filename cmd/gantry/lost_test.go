package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// workerPID finds the process of a worker by the RUNPOD_POD_ID in its environment.
func workerPID(t *testing.T, worker string) int {
	t.Helper()
	want := []byte("RUNPOD_POD_ID=" + worker + "\x00")
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil || !bytes.Contains(env, want) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
			return pid
		}
	}
	t.Fatalf("no process has RUNPOD_POD_ID=%s", worker)
	return 0
}

// TestHungWorkerIsReplaced SIGSTOPs a real echo worker process while it runs a job on an
// endpoint with workers.max 1: the worker is declared lost after 30 s, killed, and replaced, and
// the job completes on the replacement.
func TestHungWorkerIsReplaced(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits out the 30 s worker-lost timeout")
	}
	bin := buildGantry(t)
	s, key, ep := gantryUser(t, bin, t.TempDir(),
		`{"name":"hung","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["local"]},
		  "workers":{"min":0,"max":1,"idleTimeout":60},"scaling":{"type":"QUEUE_DELAY","queueDelay":4}}`)
	v2 := s.base + "/v2/" + ep
	code, j := jobCall(t, "POST", v2+"/run", key, `{"input":{"sleep_ms":2000,"echo":"done"}}`)
	if code != 200 {
		t.Fatalf("run = %d %+v", code, j)
	}
	waitStatus(t, v2+"/status/"+j.ID, key, "IN_PROGRESS")
	type workerList struct {
		Items []struct{ ID, Status string } `json:"items"`
	}
	_, body := call(t, "GET", s.base+"/v2/serverless/"+ep+"/workers", key, "")
	var ws workerList
	if err := json.Unmarshal([]byte(body), &ws); err != nil || len(ws.Items) != 1 {
		t.Fatalf("workers = %s; want one", body)
	}
	hung := ws.Items[0].ID
	pid := workerPID(t, hung)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Should the test fail, the stopped worker dies with the server (Pdeathsig).

	// Lost after 30 s, killed, replaced: the job completes on the replacement.
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, v := jobCall(t, "GET", v2+"/status/"+j.ID, key, "")
		if v.Status == "COMPLETED" {
			if v.Retries != 1 || string(v.Output) != `"done"` {
				t.Errorf("job = %+v; want COMPLETED with retries 1", v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %+v; want it COMPLETED on a replacement within 60 s", v)
		}
		time.Sleep(200 * time.Millisecond)
	}
	_, body = call(t, "GET", s.base+"/v2/serverless/"+ep+"/workers", key, "")
	ws = workerList{}
	_ = json.Unmarshal([]byte(body), &ws)
	found := ""
	for _, w := range ws.Items {
		if w.ID == hung {
			found = w.Status
		}
	}
	if found != "EXITED" && found != "STOPPING" {
		t.Errorf("workers = %s; want the hung worker %s EXITED (or STOPPING)", body, hung)
	}
	h := waitHealth(t, v2+"/health", key, func(h healthView) bool { return h.Workers.Idle == 1 })
	if h.Workers.Running+h.Workers.Initializing != 0 {
		t.Errorf("health = %+v; want only the replacement, idle", h)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); bytes.Contains(st, []byte(") T ")) {
			t.Errorf("the hung worker's process %d is still there, stopped", pid)
		}
	}
	s.stop(t)
}
