package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEchoProgressAndWorkerLog runs the echo worker's progress demo: a status poll sees the
// progress update while the job sleeps, and the worker's log file says what the worker did.
func TestEchoProgressAndWorkerLog(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	data := t.TempDir()
	s, key, ep := gantryUser(t, bin, data, echoEndpoint)
	v2 := s.base + "/v2/" + ep

	code, j := jobCall(t, "POST", v2+"/run", key, `{"input":{"sleep_ms":600000,"progress":["halfway"]}}`)
	if code != 200 {
		t.Fatalf("run = %d %+v", code, j)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, v := jobCall(t, "GET", v2+"/status/"+j.ID, key, "")
		if v.Status == "IN_PROGRESS" && string(v.Output) == `"halfway"` {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status = %+v; want IN_PROGRESS with output \"halfway\" while the job sleeps", v)
		}
		<-time.After(20 * time.Millisecond) // poll, bounded by the deadline
	}
	if code, v := jobCall(t, "POST", v2+"/cancel/"+j.ID, key, ""); code != 200 {
		t.Fatalf("cancel = %d %+v", code, v)
	}
	if code, v := jobCall(t, "POST", v2+"/runsync", key, `{"input":{"echo":1}}`); code != 200 || v.Status != "COMPLETED" {
		t.Fatalf("runsync = %d %+v", code, v)
	}

	want := []string{`msg="worker started; polling for jobs"`, `msg="job taken"`, `msg="job stopped; posting nothing"`, `msg="job done"`}
	var log string
	for deadline := time.Now().Add(30 * time.Second); ; {
		logs, _ := filepath.Glob(filepath.Join(data, "workers", ep+"-*.log"))
		log = ""
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			log += string(b)
		}
		if containsAll(log, want) || time.Now().After(deadline) {
			break
		}
		<-time.After(20 * time.Millisecond) // the line follows the post; poll, bounded by the deadline
	}
	if !containsAll(log, want) {
		t.Errorf("the worker's log lacks one of %q; it is:\n%s", want, log)
	}
	s.stop(t)
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
