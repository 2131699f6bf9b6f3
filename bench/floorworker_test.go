package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"
)

// The floor's own worker takes the queue floor's jobs and posts each one's output.
func TestFloorWorkerRunsTheQueueFloorsJobs(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	q := &queueFloor{jobs: make(chan floorJob, 8)}
	srv := &http.Server{Handler: q, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String() + "/v2/floor"
	for i := range 3 {
		q.jobs <- floorJob{id: bareID(), input: json.RawMessage(`{"echo":` + string(rune('1'+i)) + `}`)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- runFloorWorker(ctx, base+"/job-take/w?gpu=CPU", base+"/job-done/w/$ID?gpu=CPU") }()
	deadline := time.Now().Add(20 * time.Second)
	for q.done.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3 jobs done after 20 s", q.done.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := echoOutput(json.RawMessage(`{"echo":{"a":1}}`)); string(got) != `{"a":1}` {
		t.Errorf("echo output = %s; want the echo field", got)
	}
}
