// Package runpodfake is a fake RunPod for tests: an http.Handler that implements the server
// generated from the runpod adapter's API subset (rpapi) with the pod state machine RunPod
// documents, on an injected clock. It keeps pods and network volumes (volumes.go) in memory,
// answers the GPU catalog from its configuration, checks the API key (401) and its
// permission (403), rate-limits (429 with
// Retry-After, RateLimit and RateLimit-Policy on every answer), and lets a test inject capacity
// errors, pods that fail to start and throttling, and change a GPU type's stock (in all its
// data centers or in one) while it runs. A Runner, when set, runs each pod's container
// (ProcessRunner: as a local process with the pod's environment).
//
// A pod is PROVISIONING for Config.Provision after it is created, then STARTING for
// Config.Boot, then RUNNING; the fake works its pods' states out from the clock whenever it
// answers a request, so a test on a stopped clock moves pods on by advancing it.
package runpodfake

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/adapters/runpod/rpapi"
	"github.com/gantryhq/gantry/core"
)

// GPU is one GPU type of the fake's catalog.
type GPU struct {
	ID       string   // RunPod's id: "NVIDIA GeForce RTX 4090"
	Name     string   // "RTX 4090"
	MemoryGB int      // per GPU
	Price    float64  // USD per GPU per hour (secure cloud; community is 70% of it)
	MaxCount int      // most GPUs on one pod
	CUDA     []string // versions its machines run
	// DataCenters offer it; "" = {"US-TX-3"}.
	DataCenters []string
	// Availability is its stock in each of its data centers: "NONE", "LOW", "MEDIUM" or
	// "HIGH"; "" = "HIGH". A pod is placed in a data center (of those the create allows) whose
	// stock is not NONE; with none, the create fails for capacity. SetAvailability and
	// SetDataCenterAvailability change it while the fake runs.
	Availability string

	stock map[string]string // data center -> level, over Availability
}

// level is the GPU's stock in data center dc.
func (g *GPU) level(dc string) string {
	if l, ok := g.stock[dc]; ok {
		return l
	}
	return g.Availability
}

// levelRank orders stock levels.
var levelRank = map[string]int{"NONE": 0, "LOW": 1, "MEDIUM": 2, "HIGH": 3}

// best is the GPU's best stock among its data centers: the overall level the catalog reports.
func (g *GPU) best() string {
	out := "NONE"
	for _, dc := range g.DataCenters {
		if l := g.level(dc); levelRank[l] > levelRank[out] {
			out = l
		}
	}
	return out
}

// Config configures a Fake.
type Config struct {
	// Key is the API key the fake accepts (Bearer); any other answers 401. Required.
	Key string
	// Clock is the fake's time; nil = the system clock.
	Clock core.Clock
	// Provision and Boot are how long a pod is PROVISIONING, then STARTING (also after a start
	// or restart action), before it is RUNNING. 0 = at once.
	Provision, Boot time.Duration
	// GPUs is the catalog.
	GPUs []GPU
	// PerMinute is the account's rate limit, requests per minute of the clock; 0 = none.
	PerMinute int
	// Runner runs each pod's container from when the pod is RUNNING until it is stopped; nil =
	// pods have no container and run until stopped.
	Runner Runner
	// StopGrace is how long a container has after the polite signal before it is killed, on a
	// stop, restart or terminate. 0 = 2 s.
	StopGrace time.Duration
}

// Fake is a fake RunPod. Its methods are safe for concurrent use.
type Fake struct {
	cfg   Config
	clock core.Clock
	h     http.Handler

	mu        sync.Mutex
	pods      map[string]*pod
	gpus      map[string]*GPU
	seq       int
	failNext  []string          // details of the next creates to fail for capacity
	failStart map[string]string // image -> why pods of it fail to start
	throttle  int               // next requests to answer 429
	retry     int               // their Retry-After, seconds
	forbidden bool
	window    time.Time // start of the rate-limit window
	used      int       // requests in it
	requests  map[string]int
	vols      map[string]*volume // network volumes (volumes.go)
	vseq      int
}

// New returns a fake RunPod; serve it with httptest.NewServer(f).
func New(cfg Config) *Fake {
	f := &Fake{cfg: cfg, clock: cmp.Or[core.Clock](cfg.Clock, core.SystemClock{}), pods: map[string]*pod{},
		gpus: map[string]*GPU{}, failStart: map[string]string{}, requests: map[string]int{}}
	f.cfg.StopGrace = cmp.Or(cfg.StopGrace, 2*time.Second)
	for _, g := range cfg.GPUs {
		g.Availability = cmp.Or(g.Availability, "HIGH")
		if len(g.DataCenters) == 0 {
			g.DataCenters = []string{"US-TX-3"}
		}
		f.gpus[g.ID] = &g
	}
	srv, err := rpapi.NewServer(handler{f}, security{}, rpapi.WithErrorHandler(f.decodeError))
	if err != nil {
		panic(err) // the generated server takes no options that fail
	}
	f.h = srv
	return f
}

// ServeHTTP checks the key, the permission and the rate limit, then answers as RunPod would.
func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	op := r.Method + " " + routeOf(r.URL.Path)
	f.requests[op]++
	now := f.clock.Now()
	key, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	var status, retry int
	var detail string
	switch {
	case key != f.cfg.Key:
		status, detail = http.StatusUnauthorized, "missing or invalid API key"
	case f.forbidden:
		status, detail = http.StatusForbidden, "this API key lacks permission for pods"
	case f.throttle > 0:
		f.throttle--
		status, retry, detail = http.StatusTooManyRequests, f.retry, "rate limit exceeded for the minute window"
	case f.cfg.PerMinute > 0 && f.spent(now):
		status, retry, detail = http.StatusTooManyRequests, f.reset(now), "rate limit exceeded for the minute window"
	}
	if f.cfg.PerMinute > 0 && status != http.StatusUnauthorized {
		w.Header().Set("RateLimit", fmt.Sprintf(`"minute";r=%d;t=%d`, max(f.cfg.PerMinute-f.used, 0), f.reset(now)))
		w.Header().Set("RateLimit-Policy", fmt.Sprintf(`"minute";q=%d;w=60`, f.cfg.PerMinute))
	}
	f.mu.Unlock()
	if status != 0 {
		if retry > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(retry))
		}
		writeProblem(w, status, detail)
		return
	}
	f.h.ServeHTTP(w, r)
}

// spent counts a request against the window and reports whether the quota was already used.
// f.mu is held.
func (f *Fake) spent(now time.Time) bool {
	if now.Sub(f.window) >= time.Minute {
		f.window, f.used = now.Truncate(time.Minute), 0
	}
	if f.used >= f.cfg.PerMinute {
		return true
	}
	f.used++
	return false
}

// reset is the whole seconds until the rate-limit window resets. f.mu is held.
func (f *Fake) reset(now time.Time) int {
	if f.window.IsZero() {
		return 60
	}
	return max(int((f.window.Add(time.Minute).Sub(now)+time.Second-1)/time.Second), 1)
}

// routeOf names a request path by its route ("/v2/pods/{id}"), for Requests.
func routeOf(p string) string {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	if len(parts) >= 3 && parts[0] == "v2" && (parts[1] == "pods" || parts[1] == "network-volumes") {
		parts[2] = "{id}"
	}
	return "/" + strings.Join(parts, "/")
}

// FailCreates makes the next n creates fail for capacity (400), as RunPod answers when no
// machine with the GPU is free.
func (f *Fake) FailCreates(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.failNext = append(f.failNext, "There are no longer any instances available with the requested specifications. Please refresh and try again.")
	}
}

// FailStart makes pods of image fail to start: they go from STARTING to ERROR, with why in
// their system log.
func (f *Fake) FailStart(image, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failStart[image] = why
}

// Throttle makes the next n requests answer 429 with Retry-After: retryAfter seconds.
func (f *Fake) Throttle(n, retryAfter int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.throttle, f.retry = n, retryAfter
}

// Forbid makes every request with the right key answer 403 (a key without the permission)
// while on.
func (f *Fake) Forbid(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forbidden = on
}

// SetAvailability sets the stock of a GPU type in all its data centers ("NONE" makes creates
// fail for capacity), as the catalog reports it from then on.
func (f *Fake) SetAvailability(gpu, level string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if g := f.gpus[gpu]; g != nil {
		g.Availability, g.stock = level, nil
	}
}

// SetDataCenterAvailability sets the stock of a GPU type in one of its data centers.
func (f *Fake) SetDataCenterAvailability(gpu, dc, level string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if g := f.gpus[gpu]; g != nil {
		if g.stock == nil {
			g.stock = map[string]string{}
		}
		g.stock[dc] = level
	}
}

// Requests returns how many requests reached the fake for a method and route, such as
// "GET /v2/pods" or "POST /v2/pods/{id}/action" (those refused included).
func (f *Fake) Requests(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[op]
}

// Pod is what a test sees of a fake pod.
type Pod struct {
	ID, Name, Image, Args string
	Status                string
	Env                   map[string]string
	Ports                 []string
	GPU                   string
	GPUs                  int
	CUDA                  []string // allowedCudaVersions sent
	Cloud, Registry       string
	DataCenters           []string // dataCenterIds sent
	DataCenter            string   // where it was placed
	Disk                  int
	Cost                  float64
	NetworkVolume         string   // the network volume mounted (mounts.network[0].volumeId)
	VolumePath            string   // where (mounts.network[0].path)
	Log                   []string // system and container lines, oldest first
}

// Pods returns the pods that exist (not terminated), oldest first, their states worked out
// at the clock's time.
func (f *Fake) Pods() []Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance(f.clock.Now())
	var out []Pod
	for _, p := range f.sorted() {
		out = append(out, p.view())
	}
	return out
}

// Pod returns one pod by id.
func (f *Fake) Pod(id string) (Pod, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance(f.clock.Now())
	p := f.pods[id]
	if p == nil {
		return Pod{}, false
	}
	return p.view(), true
}

// Close stops every container still running (terminating nothing): call it when the test
// ends.
func (f *Fake) Close() {
	f.mu.Lock()
	var ctrs []Container
	for _, p := range f.pods {
		if p.ctr != nil {
			ctrs = append(ctrs, p.ctr)
			p.ctr = nil
		}
	}
	f.mu.Unlock()
	for _, c := range ctrs {
		c.Stop(0)
	}
}

// sorted returns the pods in creation order. f.mu is held.
func (f *Fake) sorted() []*pod {
	out := slices.Collect(maps.Values(f.pods))
	slices.SortFunc(out, func(a, b *pod) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// security accepts every request: ServeHTTP checked the key already.
type security struct{}

func (security) HandleBearerAuth(ctx context.Context, _ rpapi.OperationName, _ rpapi.BearerAuth) (context.Context, error) {
	return ctx, nil
}

var _ rpapi.SecurityHandler = security{}
