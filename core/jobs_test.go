package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/store/memq"
	"github.com/gantryhq/gantry/store/pebble"
)

// clock is the tests' fake clock.
type clock = testkit.Clock

type notifications struct {
	mu   sync.Mutex
	sent map[string][]byte
	got  chan string
	// hold keeps deliveries in flight (done is not called), as a crash interrupts them;
	// otherwise done is called at once and delivered gets the url.
	hold      atomic.Bool
	delivered chan string
	// full refuses deliveries (Notify reports false), as a full delivery queue does, and
	// sends their url on refused.
	full    atomic.Bool
	refused chan string
}

func (n *notifications) Notify(url string, body []byte, done func()) bool {
	if n.full.Load() {
		n.refused <- url
		return false
	}
	n.mu.Lock()
	n.sent[url] = body
	n.mu.Unlock()
	n.got <- url
	if !n.hold.Load() {
		done()
		n.delivered <- url
	}
	return true
}

// rig is a job engine on a real Pebble store and real queues, with an injected clock.
type rig struct {
	t     *testing.T
	jobs  *core.Jobs
	store *pebble.Store
	js    *memq.Store // the job store over store
	dir   string
	clock *clock
	ep    *core.Endpoint
	hooks *notifications
	meter core.Meter // set before open to meter jobs (the store keeps the usage)
}

func newRig(t *testing.T) *rig {
	t.Helper()
	dir := t.TempDir()
	r := &rig{t: t, dir: dir, clock: testkit.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		ep: &core.Endpoint{ID: "ep1", Owner: "alice", TimeoutMs: 60000},
		hooks: &notifications{sent: map[string][]byte{}, got: make(chan string, 16), delivered: make(chan string, 16),
			refused: make(chan string, 16)}}
	r.open()
	return r
}

// open (re)opens the store and a fresh engine on it, as a restart does.
func (r *rig) open() {
	st, err := pebble.Open(r.dir)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { st.Close() })
	r.store = st
	js, err := st.Jobs(memq.Options{Clock: r.clock})
	if err != nil {
		r.t.Fatal(err)
	}
	r.js = js
	cfg := core.JobsConfig{Store: js, Clock: r.clock,
		Notify: r.hooks, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if r.meter != nil {
		cfg.Meter, cfg.Usage = r.meter, st
	}
	r.jobs = core.NewJobs(cfg)
}

func (r *rig) submit(input string, mods ...func(*core.Submission)) core.Job {
	r.t.Helper()
	s := core.Submission{Input: []byte(input)}
	for _, m := range mods {
		m(&s)
	}
	j, err := r.jobs.Submit(r.t.Context(), r.ep, s)
	if err != nil {
		r.t.Fatalf("Submit: %v", err)
	}
	return j
}

// take takes the next job as worker w, failing if there is none within a second.
func (r *rig) take(w string) core.Taken {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	got := r.jobs.Take(ctx, r.ep.ID, w, 1)
	if len(got) != 1 {
		r.t.Fatalf("Take(%s) = %d jobs; want 1", w, len(got))
	}
	return got[0]
}

func (r *rig) status(id string) core.JobStatus {
	r.t.Helper()
	j, err := r.jobs.Get(r.t.Context(), core.JobRef{Endpoint: r.ep.ID, ID: id}, 0)
	if err != nil {
		r.t.Fatalf("Get(%s): %v", id, err)
	}
	return j.Status
}

func (r *rig) gone(id string) bool {
	_, err := r.jobs.Get(r.t.Context(), core.JobRef{Endpoint: r.ep.ID, ID: id}, 0)
	return core.KindOf(err) == core.KindNotFound
}

func TestTransitionTable(t *testing.T) {
	t.Parallel()
	states := []core.JobStatus{core.InQueue, core.InProgress, core.Completed, core.Failed, core.Cancelled, core.TimedOut}
	events := []core.Event{core.EvTake, core.EvDone, core.EvFail, core.EvProgress, core.EvCancel, core.EvPurge,
		core.EvTimeout, core.EvRequeue, core.EvLost, core.EvRelease, core.EvRetry}
	allowed := map[[2]string]core.JobStatus{
		{"IN_QUEUE", "take"}: core.InProgress, {"IN_QUEUE", "cancel"}: core.Cancelled, {"IN_QUEUE", "purge"}: core.Cancelled,
		{"IN_PROGRESS", "done"}: core.Completed, {"IN_PROGRESS", "fail"}: core.Failed, {"IN_PROGRESS", "progress"}: core.InProgress,
		{"IN_PROGRESS", "cancel"}: core.Cancelled, {"IN_PROGRESS", "timeout"}: core.TimedOut,
		{"IN_PROGRESS", "requeue"}: core.InQueue, {"IN_PROGRESS", "lost"}: core.Failed, {"IN_PROGRESS", "release"}: core.InQueue,
		{"FAILED", "retry"}: core.InQueue, {"TIMED_OUT", "retry"}: core.InQueue,
	}
	for _, s := range states {
		for _, e := range events {
			to, err := core.Next(s, e)
			want, ok := allowed[[2]string{string(s), string(e)}]
			switch {
			case ok && (err != nil || to != want):
				t.Errorf("Next(%s, %s) = %s, %v; want %s", s, e, to, err, want)
			case !ok && (err == nil || core.KindOf(err) != core.KindConflict || to != s):
				t.Errorf("Next(%s, %s) = %s, %v; want refused with a conflict, state unchanged", s, e, to, err)
			}
		}
	}
}

func TestJobLifecycle(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	j := r.submit(`{"b":1,"a":2}`, func(s *core.Submission) { s.Webhook = "http://hook.test/x" })
	if j.Status != core.InQueue || j.Retention != core.RunRetention {
		t.Fatalf("Submit = %s retention %v; want IN_QUEUE, 30m", j.Status, j.Retention)
	}
	r.clock.Advance(250 * time.Millisecond)
	tk := r.take("w1")
	if tk.ID != j.ID || string(tk.Input) != `{"b":1,"a":2}` {
		t.Fatalf("Take = %s %s; want %s with the input byte for byte", tk.ID, tk.Input, j.ID)
	}
	if err := r.jobs.Done(t.Context(), "ep1", "w1", j.ID, core.Result{Output: json.RawMessage(`{"p":1}`), Progress: true}); err != nil {
		t.Fatal(err)
	}
	got, _ := r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: j.ID}, 0)
	if got.Status != core.InProgress || string(got.Output) != `{"p":1}` {
		t.Errorf("after progress: %s %s; want IN_PROGRESS with the progress as output", got.Status, got.Output)
	}
	r.clock.Advance(time.Second)
	if err := r.jobs.Done(t.Context(), "ep1", "w1", j.ID, core.Result{Output: json.RawMessage(`"ok"`)}); err != nil {
		t.Fatal(err)
	}
	got, _ = r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: j.ID}, 0)
	now := r.clock.Now()
	if got.Status != core.Completed || string(got.Output) != `"ok"` || got.DelayTime(now) != 250 || got.ExecutionTime(now) != 1000 {
		t.Errorf("done: %s %s delay %d exec %d; want COMPLETED \"ok\" 250 1000", got.Status, got.Output, got.DelayTime(now), got.ExecutionTime(now))
	}
	// Late posts change nothing.
	for _, res := range []core.Result{{Output: json.RawMessage(`"late"`)}, {Progress: true, Output: json.RawMessage(`1`)}, {Error: "late"}} {
		if err := r.jobs.Done(t.Context(), "ep1", "w1", j.ID, res); core.KindOf(err) != core.KindConflict {
			t.Errorf("late Done(%+v) = %v; want a conflict", res, err)
		}
	}
	if err := r.jobs.StreamPart(t.Context(), "ep1", "w1", j.ID, json.RawMessage(`"x"`), nil); core.KindOf(err) != core.KindConflict {
		t.Errorf("late stream = %v; want a conflict", err)
	}
	if got, _ := r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: j.ID}, 0); string(got.Output) != `"ok"` {
		t.Errorf("output after late posts = %s", got.Output)
	}
	// The webhook got the final job with its input.
	select {
	case <-r.hooks.got:
	case <-time.After(5 * time.Second):
		t.Fatal("no webhook")
	}
	var hook core.WebhookBody
	_ = json.Unmarshal(r.hooks.sent["http://hook.test/x"], &hook)
	if hook.ID != j.ID || hook.Status != core.Completed || string(hook.Output) != `"ok"` || string(hook.Input) != `{"b":1,"a":2}` {
		t.Errorf("webhook body = %+v", hook)
	}
	// Retention: kept 30 minutes after the end, then 404.
	r.jobs.Tick(t.Context(), r.clock.Advance(29*time.Minute))
	if r.gone(j.ID) {
		t.Fatal("job gone before its 30 minute retention")
	}
	r.jobs.Tick(t.Context(), r.clock.Advance(time.Minute))
	if !r.gone(j.ID) {
		t.Error("job still there after its 30 minute retention")
	}
	if _, err := r.store.GetJob(j.ID); err == nil {
		t.Error("expired job still in the store")
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		sub  func(*core.Submission)
		keep time.Duration
	}{
		{"run", func(*core.Submission) {}, 30 * time.Minute},
		{"runsync", func(s *core.Submission) { s.Sync, s.Wait = true, 90*time.Second }, 5 * time.Minute},
		{"runsync short wait", func(s *core.Submission) { s.Sync, s.Wait = true, 5*time.Second }, time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			j := r.submit(`{}`, tc.sub)
			r.take("w")
			_ = r.jobs.Done(t.Context(), "ep1", "w", j.ID, core.Result{Output: json.RawMessage(`1`)})
			r.jobs.Tick(t.Context(), r.clock.Advance(tc.keep-time.Second))
			if r.gone(j.ID) {
				t.Fatalf("gone before %v", tc.keep)
			}
			r.jobs.Tick(t.Context(), r.clock.Advance(time.Second))
			if !r.gone(j.ID) {
				t.Errorf("kept after %v", tc.keep)
			}
		})
	}
	// A status ttl replaces the retention.
	r := newRig(t)
	j := r.submit(`{}`)
	r.take("w")
	_ = r.jobs.Done(t.Context(), "ep1", "w", j.ID, core.Result{Output: json.RawMessage(`1`)})
	if _, err := r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: j.ID}, 6*time.Second); err != nil {
		t.Fatal(err)
	}
	r.jobs.Tick(t.Context(), r.clock.Advance(6*time.Second))
	if !r.gone(j.ID) {
		t.Error("ttl=6000 did not expire the job after 6 s")
	}
	// policy.ttl bounds a queued job's life; lookups see expiry even before a tick.
	q := r.submit(`{}`, func(s *core.Submission) { s.Policy.TTLMs = 10000 })
	r.clock.Advance(10 * time.Second)
	if !r.gone(q.ID) {
		t.Error("queued job past its policy.ttl still visible")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if got := r.jobs.Take(ctx, "ep1", "w", 1); len(got) != 0 {
		t.Errorf("expired job was handed out: %v", got)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.jobs.RegisterWorker("ep1", "w1")
	queued := r.submit(`{"n":1}`)
	if j, err := r.jobs.Cancel(t.Context(), core.JobRef{Endpoint: "ep1", ID: queued.ID}); err != nil || j.Status != core.Cancelled {
		t.Fatalf("Cancel queued = %v %v", j.Status, err)
	}
	running := r.submit(`{"n":2}`)
	if tk := r.take("w1"); tk.ID != running.ID {
		t.Fatalf("took %s; want %s (the cancelled job is skipped)", tk.ID, running.ID)
	}
	if _, err := r.jobs.Cancel(t.Context(), core.JobRef{Endpoint: "ep1", ID: running.ID}); err != nil {
		t.Fatal(err)
	}
	if ids := r.jobs.JobsToStop(context.Background(), "w1", time.Second); len(ids) != 1 || ids[0] != running.ID {
		t.Errorf("JobsToStop = %v; want [%s]", ids, running.ID)
	}
	if err := r.jobs.Done(t.Context(), "ep1", "w1", running.ID, core.Result{Output: json.RawMessage(`1`)}); core.KindOf(err) != core.KindConflict {
		t.Errorf("done after cancel = %v; want a conflict", err)
	}
	if _, err := r.jobs.Cancel(t.Context(), core.JobRef{Endpoint: "ep1", ID: running.ID}); core.KindOf(err) != core.KindConflict {
		t.Errorf("second cancel = %v; want a conflict (409)", err)
	}
	if _, err := r.jobs.Cancel(t.Context(), core.JobRef{Endpoint: "ep1", ID: "nope"}); core.KindOf(err) != core.KindNotFound {
		t.Errorf("cancel unknown = %v; want not found", err)
	}
	if _, err := r.jobs.Cancel(t.Context(), core.JobRef{Endpoint: "other-endpoint", ID: running.ID}); core.KindOf(err) != core.KindNotFound {
		t.Errorf("cancel through another endpoint = %v; want not found", err)
	}
}

func TestRetryAndTimeout(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.jobs.RegisterWorker("ep1", "w1")
	j := r.submit(`{"x":1}`, func(s *core.Submission) { s.Policy.ExecutionTimeoutMs = 5000 })
	r.take("w1")
	r.jobs.Tick(t.Context(), r.clock.Advance(4999*time.Millisecond))
	if s := r.status(j.ID); s != core.InProgress {
		t.Fatalf("before the timeout: %s", s)
	}
	r.jobs.Tick(t.Context(), r.clock.Advance(time.Millisecond))
	got, _ := r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: j.ID}, 0)
	if got.Status != core.TimedOut || !strings.Contains(got.Error, "5000 ms") {
		t.Fatalf("after the timeout: %s %q; want TIMED_OUT naming 5000 ms", got.Status, got.Error)
	}
	if ids := r.jobs.JobsToStop(context.Background(), "w1", time.Second); len(ids) != 1 {
		t.Errorf("the worker was not told to stop the timed-out job: %v", ids)
	}
	if j2, err := r.jobs.Retry(t.Context(), core.JobRef{Endpoint: "ep1", ID: j.ID}); err != nil || j2.Status != core.InQueue || j2.ID != j.ID || j2.Retries != 1 || j2.Error != "" {
		t.Fatalf("Retry = %+v, %v; want IN_QUEUE, same id, retries 1, error cleared", j2, err)
	}
	tk := r.take("w1")
	if string(tk.Input) != `{"x":1}` {
		t.Errorf("retried input = %s; want the original", tk.Input)
	}
	_ = r.jobs.Done(t.Context(), "ep1", "w1", j.ID, core.Result{Error: "bad"})
	if _, err := r.jobs.Retry(t.Context(), core.JobRef{Endpoint: "ep1", ID: j.ID}); err != nil {
		t.Errorf("retry FAILED = %v", err)
	}
	r.take("w1")
	_ = r.jobs.Done(t.Context(), "ep1", "w1", j.ID, core.Result{Output: json.RawMessage(`1`)})
	if _, err := r.jobs.Retry(t.Context(), core.JobRef{Endpoint: "ep1", ID: j.ID}); core.KindOf(err) != core.KindConflict {
		t.Errorf("retry COMPLETED = %v; want a conflict", err)
	}
	if h := r.jobs.Health(t.Context(), "ep1"); h.Retried != 2 || h.Completed != 1 || h.Failed != 0 {
		t.Errorf("health = %+v; want retried 2, completed 1, failed 0", h)
	}
}

func TestWorkerLost(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.jobs.RegisterWorker("ep1", "w1")
	j := r.submit(`{}`)
	for i := 1; i <= core.RetryBudget; i++ {
		r.take("w1")
		r.jobs.Tick(t.Context(), r.clock.Advance(core.WorkerLostAfter+time.Second))
		got, _ := r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: j.ID}, 0)
		if got.Status != core.InQueue || got.Retries != i {
			t.Fatalf("loss %d: %s retries %d; want IN_QUEUE, %d", i, got.Status, got.Retries, i)
		}
	}
	r.take("w1")
	r.jobs.Tick(t.Context(), r.clock.Advance(core.WorkerLostAfter+time.Second))
	got, _ := r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: j.ID}, 0)
	if got.Status != core.Failed || !strings.Contains(got.Error, "lost") {
		t.Errorf("after the budget: %s %q; want FAILED", got.Status, got.Error)
	}
	// A worker that pings keeps its job.
	k := r.submit(`{}`, func(s *core.Submission) { s.Policy.ExecutionTimeoutMs = 600000 })
	r.take("w1")
	for range 3 {
		r.clock.Advance(core.WorkerLostAfter - time.Second)
		r.jobs.Ping(t.Context(), "w1", "")
		r.jobs.Tick(t.Context(), r.clock.Now())
	}
	if s := r.status(k.ID); s != core.InProgress {
		t.Errorf("pinging worker's job: %s; want IN_PROGRESS", s)
	}
}

func TestWrongWorkerAndPurge(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	a := r.submit(`{}`)
	r.take("w1")
	if err := r.jobs.Done(t.Context(), "ep1", "w2", a.ID, core.Result{Output: json.RawMessage(`1`)}); core.KindOf(err) != core.KindConflict {
		t.Errorf("done by another worker = %v; want a conflict", err)
	}
	if s := r.status(a.ID); s != core.InProgress {
		t.Errorf("after a foreign done: %s", s)
	}
	var queued []string
	for range 3 {
		queued = append(queued, r.submit(`{}`).ID)
	}
	if n := r.jobs.Purge(t.Context(), "ep1"); n != 3 {
		t.Errorf("Purge = %d; want 3", n)
	}
	for _, id := range queued {
		if s := r.status(id); s != core.Cancelled {
			t.Errorf("purged job %s: %s; want CANCELLED", id, s)
		}
	}
	if s := r.status(a.ID); s != core.InProgress {
		t.Errorf("running job after purge: %s; want IN_PROGRESS", s)
	}
	if h := r.jobs.Health(t.Context(), "ep1"); h.InQueue != 0 || h.InProgress != 1 {
		t.Errorf("health = %+v", h)
	}
}

func TestResultTooLarge(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	j := r.submit(`{}`)
	r.take("w")
	big := json.RawMessage(`"` + strings.Repeat("x", core.MaxResult) + `"`)
	if err := r.jobs.Done(t.Context(), "ep1", "w", j.ID, core.Result{Output: big}); err != nil {
		t.Fatal(err)
	}
	got, _ := r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: j.ID}, 0)
	if got.Status != core.Failed || !strings.Contains(got.Error, "over the 20 MB limit") {
		t.Errorf("oversized result: %s %q; want FAILED with a clear error", got.Status, got.Error)
	}
}

func TestStream(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	j := r.submit(`{}`)
	r.take("w")
	for _, p := range []string{`"a"`, `{"text":["b"]}`} {
		metrics := json.RawMessage(nil)
		if p != `"a"` {
			metrics = json.RawMessage(`{"output_tokens":1}`)
		}
		if err := r.jobs.StreamPart(t.Context(), "ep1", "w", j.ID, json.RawMessage(p), metrics); err != nil {
			t.Fatal(err)
		}
	}
	_, chunks, err := r.jobs.ReadStream(context.Background(), core.JobRef{Endpoint: "ep1", ID: j.ID}, time.Second)
	if err != nil || len(chunks) != 2 || string(chunks[1].Output) != `{"text":["b"]}` ||
		chunks[0].Metrics != nil || string(chunks[1].Metrics) != `{"output_tokens":1}` {
		t.Fatalf("ReadStream = %+v, %v; want the two parts, the second with its metrics", chunks, err)
	}
	_ = r.jobs.Done(t.Context(), "ep1", "w", j.ID, core.Result{Output: json.RawMessage(`["a"]`)})
	st, chunks, _ := r.jobs.ReadStream(context.Background(), core.JobRef{Endpoint: "ep1", ID: j.ID}, time.Second)
	if st.Status != core.Completed || len(chunks) != 0 {
		t.Errorf("second read = %s %+v; want COMPLETED with nothing (chunks are handed out once)", st.Status, chunks)
	}
}

// TestStreamPeek: PeekStream takes nothing (ReadStream after it gets every part) and still
// shows the parts ReadStream handed out, from a given Seq on.
func TestStreamPeek(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	j := r.submit(`{}`)
	r.take("w")
	ref := core.JobRef{Endpoint: "ep1", ID: j.ID}
	ctx := context.Background()
	for _, p := range []string{`"a"`, `"b"`} {
		if err := r.jobs.StreamPart(t.Context(), "ep1", "w", j.ID, json.RawMessage(p), nil); err != nil {
			t.Fatal(err)
		}
	}
	st, peeked, err := r.jobs.PeekStream(ctx, ref, 0)
	if err != nil || st.Status != core.InProgress || len(peeked) != 2 {
		t.Fatalf("PeekStream = %s %+v, %v; want IN_PROGRESS with both parts", st.Status, peeked, err)
	}
	if _, taken, err := r.jobs.ReadStream(ctx, ref, time.Second); err != nil || len(taken) != 2 {
		t.Errorf("ReadStream after a peek = %+v, %v; want both parts (a peek takes nothing)", taken, err)
	}
	if _, again, err := r.jobs.PeekStream(ctx, ref, peeked[0].Seq); err != nil || len(again) != 1 || string(again[0].Output) != `"b"` {
		t.Errorf("PeekStream after the first Seq, once read = %+v, %v; want the second part, kept", again, err)
	}
}

func TestSplitChunk(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 3000) // 6000 bytes
	for _, part := range []string{
		`"` + long + `"`,
		`[` + strings.Repeat(`"xxxxxxxxxx",`, 999) + `"x"]`,
		`{"k":"` + strings.Repeat("y", 5000) + `"}`,
	} {
		chunks := core.SplitChunk(json.RawMessage(part), 1000)
		if len(chunks) < 2 {
			t.Errorf("SplitChunk(%d bytes) = %d chunks; want several", len(part), len(chunks))
		}
		for _, c := range chunks {
			if len(c) > 1000 || !json.Valid(c) {
				t.Errorf("chunk of %d bytes, valid %v; want valid JSON of at most 1000", len(c), json.Valid(c))
			}
		}
	}
	var joined string
	for _, c := range core.SplitChunk(json.RawMessage(`"`+long+`"`), 1000) {
		var s string
		_ = json.Unmarshal(c, &s)
		joined += s
	}
	if joined != long {
		t.Error("string chunks do not join back to the original")
	}
}

// A webhook whose delivery a crash interrupted is delivered after the restart, and its job's
// delivery mark is cleared once it is delivered (Recover sends only marked jobs again).
func TestWebhookSurvivesRestart(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.hooks.hold.Store(true)
	j := r.submit(`{"a":1}`, func(s *core.Submission) { s.Webhook = "http://hook.test/w" })
	r.take("w")
	if err := r.jobs.Done(t.Context(), "ep1", "w", j.ID, core.Result{Output: json.RawMessage(`"out"`)}); err != nil {
		t.Fatal(err)
	}
	recv(t, r.hooks.got, "the first delivery")
	if rec, err := r.store.GetJob(j.ID); err != nil || !rec.WebhookPending {
		t.Fatalf("stored job while its webhook is in flight: %+v, %v; want webhookPending", rec, err)
	}

	r.store.Close() // the crash: the delivery never finished
	r.open()
	r.hooks.hold.Store(false)
	if _, _, err := r.jobs.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	recv(t, r.hooks.delivered, "the delivery after the restart")
	var hook core.WebhookBody
	r.hooks.mu.Lock()
	_ = json.Unmarshal(r.hooks.sent["http://hook.test/w"], &hook)
	r.hooks.mu.Unlock()
	if hook.ID != j.ID || hook.Status != core.Completed || string(hook.Output) != `"out"` || string(hook.Input) != `{"a":1}` {
		t.Errorf("webhook after the restart = %+v; want the completed job with its input", hook)
	}
	if rec, err := r.store.GetJob(j.ID); err != nil || rec.WebhookPending {
		t.Fatalf("stored job after the delivery: %+v, %v; want webhookPending cleared", rec, err)
	}

	r.store.Close()
	r.open()
	if _, _, err := r.jobs.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: j.ID}, 0); got.Status != core.Completed {
		t.Errorf("job after the second restart: %s", got.Status)
	}
}

func recv(t *testing.T, c <-chan string, what string) string {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
		return ""
	}
}

// TestRecover: after a restart queued jobs run in their order, running ones are requeued with
// one more retry, finished ones are kept.
func TestRecover(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	done := r.submit(`{"n":0}`)
	running := r.submit(`{"n":1}`)
	q1 := r.submit(`{"n":2}`)
	q2 := r.submit(`{"n":3}`)
	r.take("w")
	_ = r.jobs.Done(t.Context(), "ep1", "w", done.ID, core.Result{Output: json.RawMessage(`"kept"`)})
	r.take("w")
	r.store.Close()

	r.open()
	queued, requeued, err := r.jobs.Recover(t.Context())
	if err != nil || queued != 2 || requeued != 1 {
		t.Fatalf("Recover = %d, %d, %v; want 2 queued, 1 requeued", queued, requeued, err)
	}
	if got, _ := r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: done.ID}, 0); got.Status != core.Completed || string(got.Output) != `"kept"` {
		t.Errorf("finished job after restart: %s %s", got.Status, got.Output)
	}
	var order []string
	for range 3 {
		order = append(order, r.take("w2").ID)
	}
	if want := []string{running.ID, q1.ID, q2.ID}; strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("order after restart = %v; want %v (original order)", order, want)
	}
	if got, _ := r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: running.ID}, 0); got.Retries != 1 {
		t.Errorf("requeued job retries = %d; want 1", got.Retries)
	}
	if fresh := r.submit(`{}`); fresh.Seq <= q2.Seq {
		t.Errorf("new job seq %d after restart; want above %d", fresh.Seq, q2.Seq)
	}
}

// TestHotQueue: the head of the queue is taken from memory (no store read), up to the
// HotQueueBytes budget; past it, and after any other use of a queued job, the store is read.
func TestHotQueue(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	big := `{"b":"` + strings.Repeat("x", 1<<20) + `"}`
	n := memq.DefaultHotBytes/(1<<20) + 5 // more than the budget holds
	var ids []string
	for range n {
		ids = append(ids, r.submit(big).ID)
	}
	// Remove the stored inputs behind the engine's back: only hot jobs can still be taken
	// with their input.
	for _, id := range ids {
		if err := r.store.DeleteJob(id); err != nil {
			t.Fatal(err)
		}
	}
	hot := 0
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		got := r.jobs.Take(ctx, "ep1", "w", 1)
		cancel()
		if len(got) != 1 || len(got[0].Input) != len(big) {
			break // the rest were not kept in memory
		}
		hot++
	}
	if hot == 0 || hot >= n {
		t.Errorf("%d of %d jobs came from memory; want some, bounded by the %d MB budget", hot, n, memq.DefaultHotBytes>>20)
	}

	// A status ttl on a hot queued job changes the stored record; the take sees the change.
	j := r.submit(`{"k":1}`)
	if _, err := r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: j.ID}, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	tk := r.take("w")
	if string(tk.Input) != `{"k":1}` {
		t.Errorf("input after a status read = %s", tk.Input)
	}
	stored, _ := r.store.GetJob(j.ID)
	if want := r.clock.Now().Add(20 * time.Second); !stored.ExpiresAt.Equal(want) {
		t.Errorf("expiry after take = %v; want the ttl's %v (the hot copy must not revert it)", stored.ExpiresAt, want)
	}
}

// TestConcurrentSubmitTakeDone runs submitters and workers at once (meant for -race): every job
// completes once.
func TestConcurrentSubmitTakeDone(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const submitters, perSubmitter, workers = 8, 200, 8
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done sync.Map
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("w%d", w)
			for ctx.Err() == nil {
				for _, tk := range r.jobs.Take(ctx, "ep1", name, 2) {
					if err := r.jobs.Done(t.Context(), "ep1", name, tk.ID, core.Result{Output: tk.Input}); err != nil {
						t.Errorf("Done(%s): %v", tk.ID, err)
					}
					if _, dup := done.LoadOrStore(tk.ID, true); dup {
						t.Errorf("job %s taken twice", tk.ID)
					}
				}
			}
		}()
	}
	var ids sync.Map
	var sub sync.WaitGroup
	for s := range submitters {
		sub.Add(1)
		go func() {
			defer sub.Done()
			for i := range perSubmitter {
				j := r.submit(fmt.Sprintf(`{"s":%d,"i":%d}`, s, i))
				ids.Store(j.ID, true)
				if _, err := r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: j.ID}, 0); err != nil { // status reads race with takes
					t.Errorf("Get: %v", err)
				}
			}
		}()
	}
	sub.Wait()
	testkit.EventuallyWithin(t, 30*time.Second, fmt.Sprintf("%d jobs completed", submitters*perSubmitter), func() bool {
		return r.jobs.Health(t.Context(), "ep1").Completed == submitters*perSubmitter
	})
	cancel()
	wg.Wait()
	ids.Range(func(k, _ any) bool {
		if s := r.status(k.(string)); s != core.Completed {
			t.Errorf("job %s: %s", k, s)
		}
		return true
	})
}

func TestJobKey(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, sync := range []bool{false, true} {
		j := r.submit(`{}`, func(s *core.Submission) { s.Sync = sync })
		k, ok := core.ParseJobKey(j.ID)
		if !ok || k.String() != j.ID {
			t.Errorf("ParseJobKey(%q) = %v, %v; want the same id back", j.ID, k.String(), ok)
		}
		if strings.HasPrefix(j.ID, "sync-") != sync || len(strings.TrimPrefix(j.ID, "sync-")) != 36 {
			t.Errorf("id %q for sync=%v", j.ID, sync)
		}
	}
	for _, bad := range []string{"", "nope", "sync-", "00000000-0000-0000-0000-00000000000g", "000000000000-0000-0000-0000-00000000",
		"00000000-0000-0000-0000-0000000000000", "async-00000000-0000-0000-0000-000000000000"} {
		if _, ok := core.ParseJobKey(bad); ok {
			t.Errorf("ParseJobKey(%q) accepted a malformed id", bad)
		}
		if _, err := r.jobs.Get(t.Context(), core.JobRef{Endpoint: "ep1", ID: bad}, 0); core.KindOf(err) != core.KindNotFound {
			t.Errorf("Get(%q) = %v; want not found", bad, err)
		}
	}
}

// A runsync job whose wait ends before the job does outlives the wait: its input, kept in
// memory while the runsync waited, is stored then, and the job runs after a restart. One whose
// runsync never answered (the process ended first) is gone after the restart: its caller got
// no id, and its input was never stored.
func TestRunSyncJobOutlivesItsWait(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	runsync := func(s *core.Submission) { s.Sync = true }
	waited, unanswered := r.submit(`{"a":1}`, runsync), r.submit(`{"b":2}`, runsync)
	j, err := r.jobs.Wait(context.Background(), core.JobRef{Endpoint: r.ep.ID, ID: waited.ID}, time.Millisecond)
	if err != nil || j.Status != core.InQueue {
		t.Fatalf("Wait = %v, %v; want IN_QUEUE after the wait", j.Status, err)
	}
	r.store.Close()
	r.open()
	if _, _, err := r.jobs.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !r.gone(unanswered.ID) {
		t.Errorf("the runsync job that never answered is still there after a restart")
	}
	if got := r.take("w"); got.ID != waited.ID || string(got.Input) != `{"a":1}` {
		t.Errorf("took %s with input %s; want %s with its input", got.ID, got.Input, waited.ID)
	}
}
