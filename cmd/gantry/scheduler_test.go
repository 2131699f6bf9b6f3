package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type healthView struct {
	Workers struct {
		Idle, Running, Initializing, Unhealthy, Suspended, Throttled int
	} `json:"workers"`
	ColdStarts struct {
		Count  int64 `json:"count"`
		LastMs int64 `json:"lastMs"`
	} `json:"coldStarts"`
	Reason string `json:"reason"`
}

// waitHealth polls /health until ok says so, or fails after 30 s.
func waitHealth(t *testing.T, url, key string, ok func(healthView) bool) healthView {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := call(t, "GET", url, key, "")
		var h healthView
		_ = json.Unmarshal([]byte(body), &h)
		if code == 200 && ok(h) {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %d %s; the condition never held", url, code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestScaleToZeroAndFlashboot runs real echo worker processes: a FLASHBOOT endpoint scales to
// zero by suspending its idle worker (a paused process), and the next job resumes it.
func TestScaleToZeroAndFlashboot(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	data := t.TempDir()
	s, key, ep := gantryUser(t, bin, data,
		`{"name":"fb","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["local"]},"flashboot":"FLASHBOOT",
		  "workers":{"min":0,"max":2,"idleTimeout":1},"scaling":{"type":"QUEUE_DELAY","queueDelay":4}}`)
	health := s.base + "/v2/" + ep + "/health"
	run := func() {
		t.Helper()
		if code, j := jobCall(t, "POST", s.base+"/v2/"+ep+"/runsync", key, `{"input":{"echo":"hi"}}`); code != 200 || j.Status != "COMPLETED" {
			t.Fatalf("runsync = %d %+v", code, j)
		}
	}
	run() // scale from zero: a fresh worker
	h := waitHealth(t, health, key, func(h healthView) bool { return h.Workers.Suspended == 1 })
	if h.Workers.Idle+h.Workers.Running+h.Workers.Initializing != 0 || h.ColdStarts.Count != 1 {
		t.Fatalf("health after idleTimeout = %+v; want the only worker suspended, one cold start", h)
	}
	code, body := call(t, "GET", s.base+"/v2/serverless/"+ep+"/workers", key, "")
	if code != 200 || !strings.Contains(body, `"status":"SUSPENDED"`) || !strings.Contains(body, `"coldStartMs":`) {
		t.Errorf("workers = %d %s; want the one worker SUSPENDED, with its cold start", code, body)
	}
	run() // resumes the suspended worker
	h = waitHealth(t, health, key, func(h healthView) bool { return h.ColdStarts.Count == 2 })
	if h.Workers.Suspended != 0 {
		t.Errorf("health after a job = %+v; want the worker resumed", h)
	}
	logs, _ := filepath.Glob(filepath.Join(data, "workers", ep+"-*.log"))
	if len(logs) != 1 {
		t.Errorf("worker logs %v; want one worker, started once and resumed", logs)
	}
	code, metrics := call(t, "GET", s.base+"/metrics", "", "")
	for _, want := range []string{`gantry_cold_start_seconds_count{endpoint="` + ep + `",mode="resume"} 1`,
		`gantry_scaling_decisions_total{direction="down",endpoint="` + ep + `",reason="idle"} 1`} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Errorf("/metrics = %d, lacking %s:\n%s", code, want, metrics)
		}
	}
	s.stop(t)
}

// TestCrashLoopShowsInHealth runs a worker image that exits at once: /health shows it
// unhealthy with the reason, and so does the status of the job waiting for it.
func TestCrashLoopShowsInHealth(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	cfg := filepath.Join(t.TempDir(), "gantry.yaml")
	if err := os.WriteFile(cfg, []byte("images:\n  broken/worker:1: [sh, -c, 'echo no model here >&2; exit 3']\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	s := startServe(t, bin, "--data", data, "--config", cfg)
	key := newKey(t, bin, data)
	code, body := call(t, "POST", s.base+"/v2/serverless", key,
		`{"name":"broken","type":"QUEUE","image":"broken/worker:1","gpu":{"pools":["local"]},"scaling":{"type":"QUEUE_DELAY","queueDelay":4}}`)
	if code != 201 {
		t.Fatalf("create = %d %s", code, body)
	}
	var ep struct{ ID string }
	_ = json.Unmarshal([]byte(body), &ep)
	code, j := jobCall(t, "POST", s.base+"/v2/"+ep.ID+"/run", key, `{"input":{}}`)
	if code != 200 {
		t.Fatalf("run = %d %+v", code, j)
	}
	h := waitHealth(t, s.base+"/v2/"+ep.ID+"/health", key, func(h healthView) bool { return h.Workers.Unhealthy > 0 })
	if !strings.Contains(h.Reason, "exit status 3") {
		t.Errorf("health reason = %q; want the exit status", h.Reason)
	}
	code, _, b := send(t, "GET", s.base+"/v2/"+ep.ID+"/status/"+j.ID, key, "")
	var v struct{ Status, Reason string }
	_ = json.Unmarshal(b, &v)
	if code != 200 || v.Status != "IN_QUEUE" || !strings.Contains(v.Reason, "keep failing") {
		t.Errorf("status = %d %s; want IN_QUEUE with the crash loop as reason", code, b)
	}
	// Worker visibility: the exited workers, why they ended, and what they printed.
	code, body = call(t, "GET", s.base+"/v2/serverless/"+ep.ID+"/workers", key, "")
	var list struct {
		Items []struct{ ID, Status, Pool, Error string }
	}
	_ = json.Unmarshal([]byte(body), &list)
	if code != 200 || len(list.Items) == 0 || list.Items[0].Status != "EXITED" || !strings.Contains(list.Items[0].Error, "exit status 3") || list.Items[0].Pool != "local" {
		t.Fatalf("workers = %d %s; want exited workers with their exit status", code, body)
	}
	code, logs := call(t, "GET", s.base+"/v2/serverless/"+ep.ID+"/workers/"+list.Items[0].ID+"/logs?tail=5", key, "")
	if code != 200 || strings.TrimSpace(logs) != "no model here" {
		t.Errorf("worker logs = %d %q; want what it printed", code, logs)
	}
	if code, body := call(t, "GET", s.base+"/v2/serverless/"+ep.ID+"/workers/nope/logs", key, ""); code != 404 || !strings.Contains(body, "no worker nope") {
		t.Errorf("logs of an unknown worker = %d %s; want 404", code, body)
	}
	s.stop(t)
}
