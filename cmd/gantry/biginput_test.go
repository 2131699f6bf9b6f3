package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCrashKeepsLargeInputs: the large inputs (kept in files of their own, not in Pebble) of an
// acknowledged /run and of a runsync whose wait ended before its job survive SIGKILL: after a
// restart both jobs run with their inputs whole.
func TestCrashKeepsLargeInputs(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	data := t.TempDir()
	s, key, ep := gantryUser(t, bin, data, `{"name":"big","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["local"]},`+
		`"workers":{"min":0,"max":0},"scaling":{"type":"QUEUE_DELAY","queueDelay":1}}`)
	v2 := s.base + "/v2/" + ep
	payload := strings.Repeat("x", 3<<20)
	body := `{"input":{"echo":"` + payload + `"}}`
	code, run := jobCall(t, "POST", v2+"/run", key, body)
	if code != 200 || run.ID == "" {
		t.Fatalf("run = %d %+v", code, run.Status)
	}
	code, sync := jobCall(t, "POST", v2+"/runsync?wait=1000", key, body) // no worker: the wait ends first
	if code != 200 || sync.Status != "IN_QUEUE" || sync.ID == "" {
		t.Fatalf("runsync = %d %s %s; want 200 IN_QUEUE with an id", code, sync.ID, sync.Status)
	}
	if files, _ := filepath.Glob(filepath.Join(data, "pebble", "inputs", "*.input")); len(files) != 2 {
		t.Errorf("input files before the crash: %v; want the two jobs'", files)
	}
	if err := s.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	<-s.done

	s2 := startServe(t, bin, "--data", data, "--quota-minute", "0", "--quota-hour", "0", "--quota-day", "0")
	defer s2.stop(t)
	if code, out := call(t, "PATCH", s2.base+"/v2/serverless/"+ep, key, `{"workers":{"min":0,"max":1}}`); code != 200 {
		t.Fatalf("PATCH workers.max 1 = %d %s", code, out)
	}
	for _, id := range []string{run.ID, sync.ID} {
		j := waitStatus(t, s2.base+"/v2/"+ep+"/status/"+id, key, "COMPLETED")
		if string(j.Output) != `"`+payload+`"` {
			t.Errorf("job %s output: %d bytes; want its %d-byte input echoed", id, len(j.Output), len(payload)+2)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(data, "pebble", "inputs", "*.input")); len(files) != 2 {
		t.Errorf("input files after the jobs completed: %v; want both kept until the jobs expire", files)
	}
}
