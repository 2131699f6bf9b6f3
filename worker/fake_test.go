package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitTimeout bounds every wait of the tests.
const waitTimeout = 10 * time.Second

// Request kinds recorded by the fake server.
const (
	kindTake   = "take"
	kindBatch  = "take-batch"
	kindStop   = "stop"
	kindDone   = "done"
	kindStream = "stream"
	kindFile   = "file"
	kindPing   = "ping"
)

// hangUp is a status a hook returns to close the connection without an answer.
const hangUp = -1

// request is one request the fake server received.
type request struct {
	JobID       string // the {job} path segment of job-done and job-stream
	Query       url.Values
	RawQuery    string
	Body        string
	ContentType string
}

// fake is a worker-protocol server for one test: it long-polls job-take and job-stop, records
// every request and checks the headers and URLs the worker builds.
type fake struct {
	t     *testing.T
	srv   *httptest.Server
	token string

	jobs  chan string   // job-take answers (JSON objects) to hand out, in order
	stops chan []string // job-stop answers to hand out, in order

	// takeStatus and doneStatus, when set, choose the answer to the n-th (from 0) job-take or
	// job-done request: 0 for the normal one, hangUp, or an HTTP status.
	takeStatus func(n int) int
	doneStatus func(n int, r request) int

	mu      sync.Mutex
	reqs    map[string][]request
	changed chan struct{} // closed and replaced whenever reqs changes
}

// newFake starts a fake server on 127.0.0.1; it is closed when the test ends.
func newFake(t *testing.T) *fake {
	t.Helper()
	f := &fake{
		t:       t,
		token:   "tok-" + strconv.Itoa(int(nextID.Add(1))),
		jobs:    make(chan string, 16),
		stops:   make(chan []string, 16),
		reqs:    make(map[string][]request),
		changed: make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/ep/job-take/w1", f.take)
	mux.HandleFunc("GET /v2/ep/job-take-batch/w1", f.takeBatch)
	mux.HandleFunc("GET /v2/ep/job-stop/w1", f.stop)
	mux.HandleFunc("POST /v2/ep/job-done/w1/{job}", f.post(kindDone))
	mux.HandleFunc("POST /v2/ep/job-stream/w1/{job}", f.post(kindStream))
	mux.HandleFunc("POST /v2/ep/job-file/w1/{job}", f.file)
	mux.HandleFunc("GET /v2/ep/ping/w1", f.ping)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.NotFound(w, r)
	})
	f.srv = httptest.NewUnstartedServer(mux)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.srv.Listener = l
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

// nextID makes tokens and leak-check labels unique across parallel tests.
var nextID atomic.Int64

// config returns a Config pointing at the fake, with a recording sleep.
func (f *fake) config() (Config, *sleeps) {
	base := f.srv.URL + "/v2/ep/"
	s := &sleeps{}
	return Config{
		TakeURL:      base + "job-take/w1?gpu=a100",
		DoneURL:      base + "job-done/w1/$ID?gpu=a100",
		StreamURL:    base + "job-stream/w1/$ID?gpu=a100",
		PingURL:      base + "ping/w1?gpu=a100",
		Token:        f.token,
		WorkerID:     "w1",
		PingInterval: 20 * time.Millisecond,
		Client:       &http.Client{Transport: &http.Transport{}},
		Log:          slog.New(slog.NewTextHandler(testWriter{f.t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		sleep:        s.sleep,
	}, s
}

// testWriter sends the worker's logs to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimSuffix(p, []byte("\n"))))
	return len(p), nil
}

// check verifies what every worker request must carry and records it; it answers false
// (after a 4xx) when the request is malformed.
func (f *fake) check(kind string, w http.ResponseWriter, r *http.Request) (request, int, bool) {
	if got := r.Header.Get("Authorization"); got != f.token {
		f.t.Errorf("%s: Authorization = %q; want the bare token %q", kind, got, f.token)
		w.WriteHeader(http.StatusUnauthorized)
		return request{}, 0, false
	}
	if got := r.URL.Query()["gpu"]; len(got) != 1 || got[0] != "a100" {
		f.t.Errorf("%s: query %q lost the URL's own query gpu=a100", kind, r.URL.RawQuery)
		w.WriteHeader(http.StatusBadRequest)
		return request{}, 0, false
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return request{}, 0, false
	}
	req := request{
		JobID:       r.PathValue("job"),
		Query:       r.URL.Query(),
		RawQuery:    r.URL.RawQuery,
		Body:        string(body),
		ContentType: r.Header.Get("Content-Type"),
	}
	if p := req.Query.Get("job_in_progress"); (kind == kindTake || kind == kindBatch) && p != "0" && p != "1" {
		f.t.Errorf("%s: job_in_progress = %q; want 0 or 1 (query %q)", kind, p, req.RawQuery)
	}
	f.mu.Lock()
	n := len(f.reqs[kind])
	f.reqs[kind] = append(f.reqs[kind], req)
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
	return req, n, true
}

// answer writes status, or hangs up for hangUp; it reports whether it wrote anything.
func answer(w http.ResponseWriter, status int) bool {
	switch status {
	case 0:
		return false
	case hangUp:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	default:
		w.WriteHeader(status)
	}
	return true
}

// takeBatch answers job-take-batch: the queued jobs, up to batch_size, once there is one.
func (f *fake) takeBatch(w http.ResponseWriter, r *http.Request) {
	req, _, ok := f.check(kindBatch, w, r)
	if !ok {
		return
	}
	n, err := strconv.Atoi(req.Query.Get("batch_size"))
	if err != nil || n < 2 {
		f.t.Errorf("job-take-batch: batch_size %q; want 2 or more (one job is asked for with job-take)", req.Query.Get("batch_size"))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var jobs []string
	select {
	case job := <-f.jobs:
		jobs = append(jobs, job)
	case <-time.After(2 * time.Second):
		w.WriteHeader(http.StatusNoContent)
		return
	case <-r.Context().Done():
		return
	}
more:
	for len(jobs) < n {
		select {
		case job := <-f.jobs:
			jobs = append(jobs, job)
		default:
			break more
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, "["+strings.Join(jobs, ",")+"]")
}

func (f *fake) take(w http.ResponseWriter, r *http.Request) {
	_, n, ok := f.check(kindTake, w, r)
	if !ok {
		return
	}
	if f.takeStatus != nil && answer(w, f.takeStatus(n)) {
		return
	}
	select {
	case job := <-f.jobs:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, job)
	case <-time.After(2 * time.Second):
		w.WriteHeader(http.StatusNoContent)
	case <-r.Context().Done():
	}
}

func (f *fake) stop(w http.ResponseWriter, r *http.Request) {
	if _, _, ok := f.check(kindStop, w, r); !ok {
		return
	}
	select {
	case ids := <-f.stops:
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"jobsToStop":%s}`, mustJSON(f.t, ids))
	case <-time.After(2 * time.Second):
		w.WriteHeader(http.StatusNoContent)
	case <-r.Context().Done():
	}
}

func (f *fake) post(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req, n, ok := f.check(kind, w, r)
		if !ok {
			return
		}
		if req.ContentType != "application/json" {
			f.t.Errorf("%s: Content-Type = %q; want application/json", kind, req.ContentType)
		}
		if kind == kindDone && f.doneStatus != nil && answer(w, f.doneStatus(n, req)) {
			return
		}
		_, _ = io.WriteString(w, "{}")
	}
}

// file answers job-file as Gantry does: 422 for a body that is not the format ext names, else
// the stored file.
func (f *fake) file(w http.ResponseWriter, r *http.Request) {
	req, _, ok := f.check(kindFile, w, r)
	if !ok {
		return
	}
	if req.ContentType != "application/octet-stream" {
		f.t.Errorf("job-file: Content-Type = %q; want application/octet-stream", req.ContentType)
	}
	ext := req.Query.Get("ext")
	if !strings.HasPrefix(req.Body, "\x89PNG") || ext != "png" {
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = io.WriteString(w, `{"detail":"not a png"}`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"name":"j.png","url":"http://x/files/j.png?expires=1&sig=s","expiresAt":"2026-11-21T10:00:00Z","bytes":%d,"contentType":"image/png"}`, len(req.Body))
}

func (f *fake) ping(w http.ResponseWriter, r *http.Request) {
	req, _, ok := f.check(kindPing, w, r)
	if !ok {
		return
	}
	if got := req.Query.Get("runpod_version"); got != "gantry" {
		f.t.Errorf("ping: runpod_version = %q; want gantry (query %q)", got, req.RawQuery)
	}
	w.WriteHeader(http.StatusOK)
}

// requests returns a copy of the requests of a kind received so far.
func (f *fake) requests(kind string) []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.reqs[kind]...)
}

// waitFor waits until the requests of a kind satisfy cond, failing the test after waitTimeout.
func (f *fake) waitFor(kind, what string, cond func([]request) bool) []request {
	f.t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		reqs := append([]request(nil), f.reqs[kind]...)
		changed := f.changed
		f.mu.Unlock()
		if cond(reqs) {
			return reqs
		}
		select {
		case <-changed:
		case <-deadline.C:
			f.t.Fatalf("timed out waiting for %s; %s requests so far: %+v", what, kind, reqs)
		}
	}
}

// mustJSON encodes v.
func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Errorf("encoding %v: %v", v, err)
	}
	return string(b)
}

// forJob returns the requests for one job.
func forJob(reqs []request, id string) []request {
	var out []request
	for _, r := range reqs {
		if r.JobID == id {
			out = append(out, r)
		}
	}
	return out
}

// final returns the job-done requests that are results (not progress updates).
func final(reqs []request) []request {
	var out []request
	for _, r := range reqs {
		if r.Query.Has("isStream") {
			out = append(out, r)
		}
	}
	return out
}

// sleeps records the delays a worker asked for; each one is waited a thousandth of.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return sleep(ctx, d/1000)
}

func (s *sleeps) got() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// running is a Run started by start.
type running struct {
	t      *testing.T
	cancel context.CancelFunc
	done   chan error
	label  string
	client *http.Client
	once   sync.Once
}

// start runs Run(cfg, h) in the background under a unique profiler label; the test's cleanup
// stops it (see stop).
func start(t *testing.T, cfg Config, h Handler) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rn := &running{t: t, cancel: cancel, done: make(chan error, 1), label: "run-" + strconv.Itoa(int(nextID.Add(1))), client: cfg.Client}
	pprof.Do(ctx, pprof.Labels(leakLabel, rn.label), func(ctx context.Context) {
		go func() { rn.done <- Run(ctx, cfg, h) }()
	})
	t.Cleanup(rn.stop)
	return rn
}

// stop cancels Run's context and checks that Run returns nil promptly and leaves no
// goroutine behind.
func (rn *running) stop() {
	rn.t.Helper()
	rn.once.Do(func() {
		rn.cancel()
		select {
		case err := <-rn.done:
			if err != nil {
				rn.t.Errorf("Run = %v after cancel; want nil", err)
			}
		case <-time.After(waitTimeout):
			rn.t.Fatalf("Run did not return within %v of its context's cancel", waitTimeout)
		}
		if rn.client != nil {
			rn.client.CloseIdleConnections()
		}
		checkNoLeak(rn.t, rn.label)
	})
}

// leakLabel is the profiler label that marks the goroutines a Run started (and theirs).
const leakLabel = "gantry-worker-test"

// checkNoLeak fails the test when a goroutine labelled label runs the worker's code (right
// after Run returned: Run must have waited for them), or when any goroutine labelled label (the
// HTTP transport's too, once its idle connections are closed) is still alive after waitTimeout.
func checkNoLeak(t *testing.T, label string) {
	t.Helper()
	if profile, _ := labelled(t, label); strings.Contains(profile, "gantry/worker.(*runner)") {
		t.Errorf("goroutines of the worker still run after Run returned:\n%s", profile)
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		profile, found := labelled(t, label)
		if !found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines started under Run are still running after it returned:\n%s", profile)
		}
		<-time.After(5 * time.Millisecond) // poll, bounded by the deadline above
	}
}

// labelled returns the entries of the goroutine profile that carry label, and whether there
// are any.
func labelled(t *testing.T, label string) (string, bool) {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	needle := strconv.Quote(leakLabel) + ":" + strconv.Quote(label)
	var found []string
	for _, entry := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(entry, needle) {
			found = append(found, entry)
		}
	}
	return strings.Join(found, "\n\n"), len(found) > 0
}
