package worker

import (
	"context"
	"encoding/json"
	"errors"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// recv receives from ch, failing the test after waitTimeout.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// hasDone reports whether the job's result has been posted.
func hasDone(id string) func([]request) bool {
	return func(reqs []request) bool { return len(final(forJob(reqs, id))) > 0 }
}

func TestJobDone(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg, _ := f.config()
	got := make(chan *Job, 1)
	start(t, cfg, func(ctx context.Context, job *Job, r Responder) (any, error) {
		got <- job
		return map[string]any{"sum": 3, "html": "<b>&"}, nil
	})
	f.jobs <- `{"id":"job-1","input":{"a":1,"b":2},"s3Config":{"bucketName":"b"},"extra":true}`

	job := recv(t, got, "the handler")
	if job.ID != "job-1" || string(job.Input) != `{"a":1,"b":2}` || string(job.S3Config) != `{"bucketName":"b"}` {
		t.Errorf("handler got Job{ID: %q, Input: %s, S3Config: %s}; want job-1, {\"a\":1,\"b\":2}, {\"bucketName\":\"b\"}", job.ID, job.Input, job.S3Config)
	}
	done := f.waitFor(kindDone, "the result", hasDone("job-1"))
	if len(done) != 1 {
		t.Fatalf("job-done requests = %+v; want 1", done)
	}
	d := done[0]
	if want := `{"output":{"html":"<b>&","sum":3}}`; d.Body != want {
		t.Errorf("job-done body = %s; want %s", d.Body, want)
	}
	if want := "gpu=a100&isStream=false"; d.RawQuery != want {
		t.Errorf("job-done query = %q; want %q", d.RawQuery, want)
	}
	takes := f.requests(kindTake)
	if want := "gpu=a100&job_in_progress=0"; takes[0].RawQuery != want {
		t.Errorf("first job-take query = %q; want %q", takes[0].RawQuery, want)
	}
	if n := len(f.requests(kindStream)); n != 0 {
		t.Errorf("job-stream requests = %d; want 0", n)
	}
}

func TestJobWithoutInput(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg, _ := f.config()
	got := make(chan *Job, 1)
	start(t, cfg, func(ctx context.Context, job *Job, r Responder) (any, error) {
		got <- job
		return nil, nil
	})
	f.jobs <- `{"id":"j"}`
	job := recv(t, got, "the handler")
	if string(job.Input) != "null" || job.S3Config != nil {
		t.Errorf("Job{Input: %s, S3Config: %s}; want null and nil", job.Input, job.S3Config)
	}
	done := f.waitFor(kindDone, "the result", hasDone("j"))
	if want := `{"output":null}`; done[0].Body != want {
		t.Errorf("job-done body = %s; want %s", done[0].Body, want)
	}
}

func TestProgressAndStream(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg, _ := f.config()
	errs := make(chan error, 1)
	start(t, cfg, func(ctx context.Context, job *Job, r Responder) (any, error) {
		errs <- errors.Join(
			r.Progress(ctx, 10),
			r.Progress(ctx, map[string]int{"pct": 50}),
			r.Stream(ctx, "a"),
			r.Stream(ctx, json.RawMessage(`{"b":1}`)),
		)
		return []any{"a", map[string]int{"b": 1}}, nil
	})
	f.jobs <- `{"id":"job/2","input":{}}`
	if err := recv(t, errs, "the handler"); err != nil {
		t.Fatalf("Progress/Stream = %v", err)
	}
	done := f.waitFor(kindDone, "the result", hasDone("job/2"))
	want := []request{
		{JobID: "job/2", RawQuery: "gpu=a100", Body: `{"status":"IN_PROGRESS","output":10}`},
		{JobID: "job/2", RawQuery: "gpu=a100", Body: `{"status":"IN_PROGRESS","output":{"pct":50}}`},
		{JobID: "job/2", RawQuery: "gpu=a100&isStream=true", Body: `{"output":["a",{"b":1}]}`},
	}
	compare(t, kindDone, done, want)
	compare(t, kindStream, f.requests(kindStream), []request{
		{JobID: "job/2", RawQuery: "gpu=a100&isStream=false", Body: `{"output":"a"}`},
		{JobID: "job/2", RawQuery: "gpu=a100&isStream=false", Body: `{"output":{"b":1}}`},
	})
}

// compare checks job id, query and body of each request, in order.
func compare(t *testing.T, kind string, got, want []request) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s requests = %+v; want %d of them", kind, got, len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.JobID != w.JobID || g.RawQuery != w.RawQuery || g.Body != w.Body {
			t.Errorf("%s request %d = (%s ?%s %s); want (%s ?%s %s)", kind, i, g.JobID, g.RawQuery, g.Body, w.JobID, w.RawQuery, w.Body)
		}
	}
}

func TestResults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		h    Handler
		want string
	}{
		{"error", func(context.Context, *Job, Responder) (any, error) { return "ignored", errors.New(`bad "input"`) }, `{"error":"bad \"input\""}`},
		{"panic", func(context.Context, *Job, Responder) (any, error) { panic("kaboom") }, `{"error":"handler panicked: kaboom"}`},
		{"stopPod", func(context.Context, *Job, Responder) (any, error) { return Result{Output: "x", StopPod: true}, nil }, `{"output":"x","stopPod":true}`},
		{"*Result", func(context.Context, *Job, Responder) (any, error) { return &Result{Output: 1}, nil }, `{"output":1}`},
		{"raw", func(context.Context, *Job, Responder) (any, error) { return json.RawMessage(`[1, 2]`), nil }, `{"output":[1,2]}`},
		{"unencodable", func(context.Context, *Job, Responder) (any, error) { return make(chan int), nil }, `{"error":"encoding the output: json: unsupported type: chan int"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			cfg, _ := f.config()
			start(t, cfg, tt.h)
			f.jobs <- `{"id":"j1","input":{}}`
			done := f.waitFor(kindDone, "the result", hasDone("j1"))
			if done[0].Body != tt.want {
				t.Errorf("job-done body = %s; want %s", done[0].Body, tt.want)
			}
		})
	}
}

func TestPanicKeepsWorking(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg, _ := f.config()
	start(t, cfg, func(_ context.Context, job *Job, _ Responder) (any, error) {
		if job.ID == "j1" {
			var m map[string]int
			m["x"] = 1 //nolint:staticcheck // a runtime panic, on purpose
		}
		return "ok", nil
	})
	f.jobs <- `{"id":"j1","input":{}}`
	f.jobs <- `{"id":"j2","input":{}}`
	done := f.waitFor(kindDone, "both results", func(r []request) bool { return hasDone("j1")(r) && hasDone("j2")(r) })
	if b := forJob(done, "j1")[0].Body; !strings.HasPrefix(b, `{"error":"handler panicked: assignment to entry in nil map`) {
		t.Errorf("job-done body of the panicking job = %s; want a handler panicked error", b)
	}
	if b := forJob(done, "j2")[0].Body; b != `{"output":"ok"}` {
		t.Errorf("job-done body of the next job = %s; want {\"output\":\"ok\"}", b)
	}
}

func TestJobStop(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg, _ := f.config()
	started := make(chan struct{}, 1)
	stopped := make(chan error, 1)
	start(t, cfg, func(ctx context.Context, job *Job, r Responder) (any, error) {
		if job.ID != "j1" {
			return "second", nil
		}
		started <- struct{}{}
		<-ctx.Done()
		// A context that is not cancelled must not let a post through either.
		bg := context.Background()
		stopped <- errors.Join(context.Cause(ctx), r.Progress(bg, "late"), r.Stream(bg, "late"))
		return "finished anyway", nil // must not be posted either
	})
	f.jobs <- `{"id":"j1","input":{}}`
	recv(t, started, "the handler to start")
	f.stops <- []string{"other", "j1"}
	err := recv(t, stopped, "the handler to be cancelled")
	if n := len(multi(err)); n != 3 || !errors.Is(err, ErrStopped) {
		t.Errorf("Cause, Progress, Stream after job-stop = %v; want ErrStopped three times", err)
	}
	for _, e := range multi(err) {
		if !errors.Is(e, ErrStopped) {
			t.Errorf("after job-stop got %v; want ErrStopped", e)
		}
	}
	// The worker runs one job at a time: once the next job's result is in, whatever it
	// would have posted for j1 would be in too.
	f.jobs <- `{"id":"j2","input":{}}`
	done := f.waitFor(kindDone, "the next result", hasDone("j2"))
	if got := forJob(done, "j1"); len(got) != 0 {
		t.Errorf("job-done requests for the stopped job = %+v; want none", got)
	}
	if got := f.requests(kindStream); len(got) != 0 {
		t.Errorf("job-stream requests = %+v; want none", got)
	}
}

// multi unwraps an errors.Join.
func multi(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return nil
}

func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	r := &runner{cfg: Config{}, log: discardLog, jobs: make(map[string]*activeJob)}
	r.stop([]string{"early"})
	if j, _ := r.register(context.Background(), "early"); j != nil {
		t.Errorf("register(early) after job-stop named it = %v; want nil (do not run)", j)
	}
	j, ctx := r.register(context.Background(), "early")
	if j == nil || ctx.Err() != nil {
		t.Fatalf("second register(early) = %v, %v; want a running job (an early stop applies once)", j, ctx.Err())
	}
	if dup, _ := r.register(context.Background(), "early"); dup != nil {
		t.Errorf("register of a job in progress = %v; want nil", dup)
	}
	for i := range 2 * maxEarlyStops {
		r.stop([]string{"x" + string(rune('a'+i%26)) + string(rune('a'+i/26))})
	}
	if n := len(r.earlyStops); n != maxEarlyStops {
		t.Errorf("len(earlyStops) = %d; want the bound %d", n, maxEarlyStops)
	}
}

func TestThrottle(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.takeStatus = func(n int) int {
		if n == 0 {
			return 429
		}
		return 0
	}
	cfg, sl := f.config()
	start(t, cfg, func(context.Context, *Job, Responder) (any, error) { return "ok", nil })
	f.jobs <- `{"id":"j1","input":{}}`
	f.waitFor(kindDone, "the result", hasDone("j1"))
	if got, want := sl.got(), []time.Duration{5 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("delays after a 429 = %v; want %v", got, want)
	}
}

func TestThrottleHonoursContext(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.takeStatus = func(int) int { return 429 }
	cfg, _ := f.config()
	cfg.sleep = nil // the real 5 s wait
	rn := start(t, cfg, func(context.Context, *Job, Responder) (any, error) { return nil, nil })
	f.waitFor(kindTake, "a job-take", func(r []request) bool { return len(r) > 0 })
	began := time.Now()
	rn.stop()
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("Run took %v to return while waiting out a 429; want it to stop waiting at once", d)
	}
	if n := len(f.requests(kindTake)); n != 1 {
		t.Errorf("job-take requests = %d; want 1 (the next waits 5 s)", n)
	}
}

func TestTakeBackoff(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.takeStatus = func(n int) int {
		switch {
		case n < 8, n == 9, n == 10:
			return 500
		case n == 11:
			return 404
		}
		return 0
	}
	cfg, sl := f.config()
	start(t, cfg, func(context.Context, *Job, Responder) (any, error) { return "ok", nil })
	f.jobs <- `{"id":"j1","input":{}}`
	f.waitFor(kindDone, "the result", hasDone("j1"))
	f.jobs <- `{"id":"j2","input":{}}`
	f.waitFor(kindDone, "the second result", hasDone("j2"))
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5000 * ms, 5000 * ms, 100 * ms, 200 * ms, 400 * ms}
	if got := sl.got(); !slices.Equal(got, want) {
		t.Errorf("delays = %v; want %v (doubling to 5 s, reset by a success)", got, want)
	}
}

func TestDoneRetry(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	script := map[string][]int{
		"ok-third": {503, 502, 0},
		"dropped":  {503, 500, 500, 0},
		"rejected": {400, 0},
		"hangup":   {hangUp, 0},
	}
	var mu = make(chan struct{}, 1)
	seen := map[string]int{}
	f.doneStatus = func(_ int, r request) int {
		mu <- struct{}{}
		defer func() { <-mu }()
		n := seen[r.JobID]
		seen[r.JobID]++
		if s := script[r.JobID]; n < len(s) {
			return s[n]
		}
		return 0
	}
	cfg, sl := f.config()
	start(t, cfg, func(context.Context, *Job, Responder) (any, error) { return "ok", nil })
	for _, id := range []string{"ok-third", "dropped", "rejected", "hangup", "last"} {
		f.jobs <- `{"id":"` + id + `","input":{}}`
	}
	done := f.waitFor(kindDone, "the last result", hasDone("last"))
	for id, want := range map[string]int{"ok-third": 3, "dropped": 3, "rejected": 1, "hangup": 2, "last": 1} {
		if got := len(forJob(done, id)); got != want {
			t.Errorf("job-done attempts for %s = %d; want %d", id, got, want)
		}
	}
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 100 * ms, 200 * ms, 100 * ms}
	if got := sl.got(); !slices.Equal(got, want) {
		t.Errorf("delays between attempts = %v; want %v", got, want)
	}
}

// holding returns a handler that reports each job's id on started and holds the job until
// release is closed (or its context ends), then outputs its id.
func holding(n int) (started chan string, release chan struct{}, h Handler) {
	started, release = make(chan string, n), make(chan struct{})
	return started, release, func(ctx context.Context, job *Job, _ Responder) (any, error) {
		started <- job.ID
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return job.ID, nil
	}
}

func TestConcurrencyAndPing(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg, _ := f.config()
	cfg.Concurrency = 2
	started, release, h := holding(2)
	start(t, cfg, h)
	f.waitFor(kindPing, "an idle ping", func(r []request) bool { return len(r) > 0 })
	if p := f.requests(kindPing)[0]; p.RawQuery != "gpu=a100&runpod_version=gantry" {
		t.Errorf("idle ping query = %q; want gpu=a100&runpod_version=gantry", p.RawQuery)
	}
	f.jobs <- `{"id":"j1","input":{}}`
	first := recv(t, started, "the first job")
	f.waitFor(kindTake, "a job-take with a job in progress", func(r []request) bool {
		return slices.ContainsFunc(r, func(r request) bool { return r.Query.Get("job_in_progress") == "1" })
	})
	// The poll for the free slot takes j2 while j1 is held: both handlers run at once.
	f.jobs <- `{"id":"j2","input":{}}`
	ids := []string{first, recv(t, started, "the second job")}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"j1", "j2"}) {
		t.Fatalf("started jobs %v; want j1 and j2", ids)
	}
	f.waitFor(kindPing, "a ping naming both jobs", func(r []request) bool {
		return len(r) > 0 && r[len(r)-1].RawQuery == "gpu=a100&job_id=j1,j2&runpod_version=gantry"
	})
	close(release)
	f.waitFor(kindDone, "both results", func(r []request) bool { return hasDone("j1")(r) && hasDone("j2")(r) })
	f.waitFor(kindPing, "an idle ping after the jobs", func(r []request) bool {
		return len(r) > 0 && !r[len(r)-1].Query.Has("job_id")
	})
}

// With Concurrency 3 the worker asks for as many jobs as it has free slots in one
// job-take-batch long-poll, runs them at once, and asks with job-take when one slot is free.
func TestConcurrencyTakesBatches(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg, _ := f.config()
	cfg.Concurrency = 3
	f.jobs <- `{"id":"j1","input":{}}`
	f.jobs <- `{"id":"j2","input":{}}`
	started, release, h := holding(3)
	start(t, cfg, h)
	ids := []string{recv(t, started, "the first job"), recv(t, started, "the second job")}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"j1", "j2"}) {
		t.Fatalf("started jobs %v; want j1 and j2 from one batch", ids)
	}
	if b := f.requests(kindBatch); len(b) == 0 || b[0].Query.Get("batch_size") != "3" || b[0].Query.Get("job_in_progress") != "0" {
		t.Fatalf("job-take-batch requests %+v; want the first with batch_size=3 and job_in_progress=0", b)
	}
	// Two slots are held: the last free one is asked for with job-take.
	f.waitFor(kindTake, "a job-take for the last slot", func(r []request) bool {
		return slices.ContainsFunc(r, func(r request) bool { return r.Query.Get("job_in_progress") == "1" })
	})
	f.jobs <- `{"id":"j3","input":{}}`
	if id := recv(t, started, "the third job"); id != "j3" {
		t.Fatalf("third job %s; want j3", id)
	}
	close(release)
	f.waitFor(kindDone, "three results", func(r []request) bool { return hasDone("j1")(r) && hasDone("j2")(r) && hasDone("j3")(r) })
	// Free again: the next poll asks for three.
	f.waitFor(kindBatch, "a batch of three once the jobs are done", func(r []request) bool {
		last := r[len(r)-1]
		return len(r) > 1 && last.Query.Get("batch_size") == "3" && last.Query.Get("job_in_progress") == "0"
	})
}

func TestStopPodStopsTaking(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg, _ := f.config()
	start(t, cfg, func(context.Context, *Job, Responder) (any, error) { return Result{Output: 1, StopPod: true}, nil })
	f.jobs <- `{"id":"j1","input":{}}`
	f.waitFor(kindDone, "the result", hasDone("j1"))
	takes := len(f.requests(kindTake))
	// Pings continue; after a few, no further job-take may have been made.
	pings := len(f.requests(kindPing))
	f.waitFor(kindPing, "more pings", func(r []request) bool { return len(r) >= pings+3 })
	if n := len(f.requests(kindTake)); n != takes {
		t.Errorf("job-take requests went from %d to %d after a stopPod result; want no more", takes, n)
	}
}

func TestShutdown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ret  func(ctx context.Context) (any, error)
		want []string // job-done bodies once Run returned
	}{
		{"interrupted", func(ctx context.Context) (any, error) { return nil, ctx.Err() }, nil},
		{"finishes", func(context.Context) (any, error) { return "saved", nil }, []string{`{"output":"saved"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			cfg, _ := f.config()
			started := make(chan struct{}, 1)
			rn := start(t, cfg, func(ctx context.Context, job *Job, _ Responder) (any, error) {
				started <- struct{}{}
				<-ctx.Done()
				return tt.ret(ctx)
			})
			f.jobs <- `{"id":"j1","input":{}}`
			recv(t, started, "the handler")
			rn.stop() // Run has returned: every post it made is recorded
			var got []string
			for _, r := range f.requests(kindDone) {
				got = append(got, r.Body)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("job-done bodies = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestURLs(t *testing.T) {
	t.Parallel()
	tests := []struct{ fn, in, want string }{
		{"withQuery", "http://h/p?gpu=x", "http://h/p?gpu=x&a=1"},
		{"withQuery", "http://h/p", "http://h/p?a=1"},
		{"withQuery", "http://h/p?", "http://h/p?a=1"},
		{"withQuery", "http://h/p?gpu=x&", "http://h/p?gpu=x&a=1"},
		{"jobURL", "http://h/job-done/w/$ID?gpu=x", "http://h/job-done/w/a%2Fb%20c?gpu=x"},
		{"stopURL", "http://h/v2/ep/job-take/w?gpu=x", "http://h/v2/ep/job-stop/w?gpu=x"},
		{"stopURL", "http://h/v2/ep/take/w?gpu=x", ""},
		{"fileURL", "http://h/v2/ep/job-done/w/$ID?gpu=x", "http://h/v2/ep/job-file/w/$ID?gpu=x"},
		{"fileURL", "http://h/v2/ep/done/w/$ID?gpu=x", ""},
	}
	for _, tt := range tests {
		var got string
		switch tt.fn {
		case "withQuery":
			got = withQuery(tt.in, "a=1")
		case "jobURL":
			got = jobURL(tt.in, "a/b c")
		case "stopURL":
			got = stopURL(tt.in)
		case "fileURL":
			got = fileURL(tt.in)
		}
		if got != tt.want {
			t.Errorf("%s(%q) = %q; want %q", tt.fn, tt.in, got, tt.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	var b backoff
	var got []time.Duration
	for range 8 {
		got = append(got, b.next())
	}
	b.reset()
	got = append(got, b.next())
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5000 * ms, 5000 * ms, 100 * ms}
	if !slices.Equal(got, want) {
		t.Errorf("backoff delays = %v; want %v", got, want)
	}
}

func FuzzDecodeJob(f *testing.F) {
	for _, s := range []string{`{"id":"a","input":{"x":1}}`, `{"id":"a"}`, `{"input":1}`, `[]`, `{"id":1}`, `{"id":"a","s3Config":null}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		job, err := decodeJob(b)
		if err != nil {
			return
		}
		if job.ID == "" || !json.Valid(job.Input) || (job.S3Config != nil && !json.Valid(job.S3Config)) {
			t.Errorf("decodeJob(%q) = %+v; want an id and valid JSON", b, job)
		}
	})
}

// TestLeakCheck shows that the leak check sees a goroutine a labelled one started.
func TestLeakCheck(t *testing.T) {
	t.Parallel()
	label := "leak-" + strconv.Itoa(int(nextID.Add(1)))
	release := make(chan struct{})
	pprof.Do(t.Context(), pprof.Labels(leakLabel, label), func(context.Context) {
		go func() {
			go func() { <-release }() // a grandchild inherits the label too
			<-release
		}()
	})
	deadline := time.After(waitTimeout)
	for {
		if _, found := labelled(t, label); found {
			break
		}
		select {
		case <-deadline:
			t.Fatal("the leak check does not see a running labelled goroutine")
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(release)
	checkNoLeak(t, label)
}

func TestResponderAfterReturn(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg, _ := f.config()
	kept := make(chan Responder, 1)
	start(t, cfg, func(_ context.Context, _ *Job, r Responder) (any, error) {
		kept <- r
		return "done", nil
	})
	f.jobs <- `{"id":"j1","input":{}}`
	r := recv(t, kept, "the handler")
	f.waitFor(kindDone, "the result", hasDone("j1"))
	if err := r.Progress(context.Background(), "late"); !errors.Is(err, errFinished) {
		t.Errorf("Progress after the handler returned = %v; want %v", err, errFinished)
	}
	if err := r.Stream(context.Background(), "late"); !errors.Is(err, errFinished) {
		t.Errorf("Stream after the handler returned = %v; want %v", err, errFinished)
	}
	if got := f.requests(kindDone); len(got) != 1 {
		t.Errorf("job-done requests = %+v; want only the result", got)
	}
	if got := f.requests(kindStream); len(got) != 0 {
		t.Errorf("job-stream requests = %+v; want none", got)
	}
}

// TestChunksAndFiles streams parts with metrics and stores a file through job-file.
func TestChunksAndFiles(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg, _ := f.config()
	type result struct {
		file File
		err  error
	}
	got := make(chan result, 1)
	start(t, cfg, func(ctx context.Context, job *Job, r Responder) (any, error) {
		err := errors.Join(
			r.Stream(ctx, Chunk{Output: map[string]any{"text": []string{"a"}}, Metrics: map[string]int{"output_tokens": 1}}),
			r.Stream(ctx, &Chunk{Output: "b"}),
		)
		file, ferr := r.PutFile(ctx, "png", []byte("\x89PNG\r\n\x1a\nrest"))
		_, bad := r.PutFile(ctx, "gif", []byte("not a gif"))
		if bad == nil {
			err = errors.Join(err, errors.New("PutFile of a refused file returned no error"))
		}
		got <- result{file, errors.Join(err, ferr)}
		return file.URL, nil
	})
	f.jobs <- `{"id":"j1","input":{}}`
	res := recv(t, got, "the handler")
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.file.URL != "http://x/files/j.png?expires=1&sig=s" || res.file.Bytes != 12 || res.file.ContentType != "image/png" ||
		!res.file.ExpiresAt.Equal(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("PutFile = %+v", res.file)
	}
	compare(t, kindStream, f.requests(kindStream), []request{
		{JobID: "j1", RawQuery: "gpu=a100&isStream=false", Body: `{"output":{"text":["a"]},"metrics":{"output_tokens":1}}`},
		{JobID: "j1", RawQuery: "gpu=a100&isStream=false", Body: `{"output":"b"}`},
	})
	files := f.requests(kindFile)
	if len(files) != 2 || files[0].RawQuery != "gpu=a100&ext=png" || files[0].Body != "\x89PNG\r\n\x1a\nrest" || files[1].RawQuery != "gpu=a100&ext=gif" {
		t.Errorf("job-file requests = %+v; want the png, then the refused gif (not retried: a 4xx is final)", files)
	}
	f.waitFor(kindDone, "the result", hasDone("j1"))
}
