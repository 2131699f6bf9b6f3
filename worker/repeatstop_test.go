package worker

import (
	"context"
	"testing"
)

// Gantry names a stopped job in job-stop again while the worker may still run it. The worker
// honours the first, early stop (its job-take answer was still on its way) and runs nothing
// for that job however often it is named; the next job runs and posts as usual.
func TestRepeatedEarlyStop(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg, _ := f.config()
	ran := make(chan string, 4)
	start(t, cfg, func(ctx context.Context, job *Job, r Responder) (any, error) {
		ran <- job.ID
		return job.ID, nil
	})
	for range 3 {
		f.stops <- []string{"j1"}
	}
	f.waitFor(kindStop, "the stops to be read", func(reqs []request) bool { return len(reqs) >= 4 })
	f.jobs <- `{"id":"j1","input":{}}`
	f.jobs <- `{"id":"j2","input":{}}`
	done := f.waitFor(kindDone, "the next result", hasDone("j2"))
	if got := forJob(done, "j1"); len(got) != 0 {
		t.Errorf("job-done requests for the stopped job = %+v; want none", got)
	}
	if got := recv(t, ran, "a handler to run"); got != "j2" {
		t.Errorf("the handler ran %s; want only j2", got)
	}
}
