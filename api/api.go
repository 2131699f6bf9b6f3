// Package api implements the generated oas.Handler: it translates between the wire types and
// core, authenticates callers, applies rate limits and body caps, and renders every error as
// application/problem+json. It holds no business rules.
package api

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-faster/jx"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/lbproxy"
	"github.com/gantryhq/gantry/oas"
	"github.com/gantryhq/gantry/webhook"
)

// Body caps per operation, in bytes (spec 8); everything else gets DefaultBodyCap.
const (
	RunBodyCap     = 10 << 20
	RunSyncBodyCap = 20 << 20
	WorkerBodyCap  = 64 << 20
	DefaultBodyCap = 1 << 20
)

// Config wires the API to the services it fronts.
type Config struct {
	Management *core.Management
	Auth       *core.Authenticator
	// Limiter counts requests against the users' rate-limit windows (core.RateLimiter: in
	// memory). A request it cannot count is refused with 503 (authenticate says why).
	Limiter core.RateLimits
	Jobs    *core.Jobs
	// Models is the catalog of ready-made models (nil = none), Billing answers usage reports,
	// and Files keeps the files model jobs produce (nil = none).
	Models  *core.Models
	Billing *core.Billing
	Files   *core.Files
	Clock   core.Clock
	// TakeWait bounds the job-take and job-stop long polls (default 30 s).
	TakeWait time.Duration
	// PublicURL is the base of the request URLs handed out, e.g. "http://127.0.0.1:8080".
	PublicURL string
	Log       *slog.Logger
	// Balancer hands LOAD_BALANCER requests to workers; nil = such endpoints answer 503.
	Balancer core.Balancer
	// Leader, with several replicas on one store, says where LOAD_BALANCER requests are
	// served: self = here (this replica leads, or is alone); else by holder, the leading
	// replica, to whose peerURL this one forwards them after checking the key ("" = unknown:
	// none leads yet, or the leader published none). nil = always here.
	Leader func() (self bool, holder, peerURL string)
	// Fleet shows endpoints' workers and their logs; nil = none are shown.
	Fleet core.Fleet
	// LBHold is how long a LOAD_BALANCER request waits for a ready worker (scale from zero)
	// before a 503; 0 = DefaultLBHold.
	LBHold time.Duration
	// LBObserver hears of each LOAD_BALANCER request answered on this replica (metrics);
	// nil = none. A replica that forwards a request to the leader leaves it to the leader's.
	LBObserver lbproxy.Observer
	// Webhooks is where job webhooks may go; the zero policy refuses private addresses.
	Webhooks webhook.Policy
	// BodyReadTimeout bounds the reading of one request body, from the moment the handler
	// starts reading it: a slower upload gets 408 and its connection closed.
	// 0 = DefaultBodyReadTimeout (60 s); negative = no bound.
	BodyReadTimeout time.Duration
	// BodyBudget bounds the request-body bytes all requests together hold at once (from
	// reading a body until its request is answered); a request whose body would overspend it
	// gets 503 with Retry-After before its body is read. 0 = DefaultBodyBudget (256 MiB);
	// negative = no bound.
	BodyBudget int64
	// TracerProvider, when set, traces every operation through the generated server's hooks
	// (a span per request, joining the trace of a W3C traceparent header). The request's
	// context, which carries its span, reaches core.Jobs.Submit, whose observer makes the
	// job's take and end spans of the submit's trace. nil = no traces: the generated server
	// gets no-op providers, and a well-formed /run takes runfast.go's path, which has no hooks.
	TracerProvider trace.TracerProvider
	// StoreCheck tells whether the store the server needs answers (nil = nothing to check):
	// while it fails, /healthz answers 503, so that a load balancer sends this replica no
	// requests it could only refuse. Its answer is kept StoreCheckTTL (health.go).
	StoreCheck func(context.Context) error
	// ExpiredKeyGrace is how long an expired API key stays in the key list before it is
	// deleted; 0 = core.DefaultExpiredKeyGrace (7 days).
	ExpiredKeyGrace time.Duration
}

// API is Gantry's HTTP front: /healthz plus every operation of openapi.yaml.
type API struct {
	cfg   Config
	oas   *oas.Server
	h     *handler
	lb    *lbproxy.Proxy         // serves /lb/, asking lbAdmission (lb.go)
	fwd   *httputil.ReverseProxy // forwards /lb/ to the leader, on a replica that does not lead (lb.go)
	ready atomic.Bool

	requests *requests    // requests by operation and status (requests.go)
	draining atomic.Bool  // a graceful stop: only the workers' requests are served (drain.go)
	inflight atomic.Int64 // request-body bytes held against cfg.BodyBudget (body.go)

	storeHealth storeHealth // the last answer of cfg.StoreCheck (health.go)
}

// New builds the API. It answers 503 on /healthz until SetReady(true).
func New(cfg Config) (*API, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.TakeWait == 0 {
		cfg.TakeWait = DefaultTakeWait
	}
	if cfg.LBHold == 0 {
		cfg.LBHold = DefaultLBHold
	}
	cfg.BodyReadTimeout = cmp.Or(cfg.BodyReadTimeout, DefaultBodyReadTimeout)
	cfg.BodyBudget = cmp.Or(cfg.BodyBudget, DefaultBodyBudget)
	a := &API{cfg: cfg, requests: newRequests()}
	h := &handler{cfg: &a.cfg}
	a.h = h
	a.lb = lbproxy.New(lbAdmission{a}, cfg.LBObserver)
	a.fwd = a.newLBForward()
	// No-op telemetry: nothing reads the generated server's spans or metrics, and the global
	// providers it would use by default still build a span and attribute sets per request.
	// The generated server's own metrics are not read (requests.go counts requests), so its
	// meter stays a no-op even with traces on.
	tp := cfg.TracerProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	srv, err := oas.NewServer(h, h, h, oas.WithErrorHandler(a.renderError), oas.WithNotFound(a.notFound),
		oas.WithMethodNotAllowed(a.methodNotAllowed),
		oas.WithTracerProvider(tp), oas.WithMeterProvider(metricnoop.NewMeterProvider()))
	if err != nil {
		return nil, err
	}
	a.oas = srv
	return a, nil
}

// SetReady flips /healthz between 503 and 200 (503 all the same while Config.StoreCheck fails).
func (a *API) SetReady(ready bool) { a.ready.Store(ready) }

// ServeHTTP routes /healthz and /livez itself and hands the rest to the generated server, after the
// checks that must see the raw request: body caps (413), JSON syntax (400), and the worker
// routes' Content-Type (RunPod workers post JSON as a form).
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		a.serveHealthz(w, r) // health.go
		return
	}
	if r.URL.Path == "/livez" {
		a.serveLivez(w, r) // health.go
		return
	}
	if strings.HasPrefix(r.URL.Path, LBPrefix) && !a.draining.Load() {
		a.serveLB(w, r) // the workers' answers, relayed (lbproxy): not counted
		return
	}
	rec := &lbproxy.StatusRecorder{ResponseWriter: w}
	op := a.serveAPI(rec, r)
	a.requests.count(op, answeredStatus(rec))
}

// serveAPI serves a request of the API (not /healthz, not /lb/) and returns the operation that
// answered it ("" when none did).
func (a *API) serveAPI(w http.ResponseWriter, r *http.Request) (op string) {
	if strings.HasPrefix(r.URL.Path, "/files/") {
		fileHeaders(w.Header())
	}
	if a.draining.Load() && a.refuseDraining(w, r) {
		return ""
	}
	if strings.HasPrefix(r.URL.Path, LBPrefix) {
		a.serveLB(w, r)
		return ""
	}
	ctx := r.Context()
	if a.cfg.TracerProvider != nil { // the caller's trace, if it names one
		ctx = traceContext.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	ctx = context.WithValue(context.WithValue(ctx, writerKey{}, w), requestKey{}, r)
	route, ok := a.oas.FindPath(headAsGet(r).Method, r.URL)
	op = route.OperationID()
	if ok {
		var err error
		if ctx, err = a.preauthenticate(ctx, r, route); err != nil {
			closeUnread(w, r)
			a.writeProblem(w, r, toCoreError(err))
			return op
		}
	}
	if ok && r.Body != nil && r.Body != http.NoBody && r.Method != http.MethodGet {
		body, held, err := a.readBody(w, r, bodyCap(op))
		defer a.release(held)
		var tooLarge *http.MaxBytesError
		if err != nil {
			closeUnread(w, r)
		}
		switch {
		case errors.As(err, &tooLarge):
			if op == "workerJobDone" {
				a.refuseResult(r, route.Args(), tooLarge.Limit)
			}
			a.writeProblem(w, r, core.Errorf(core.KindTooLarge, "the body is larger than this operation's limit of %s", byteSize(tooLarge.Limit)))
			return op
		case err != nil:
			a.writeProblem(w, r, a.readError(w, err))
			return op
		}
		if isWorkerOp(op) && op != "workerJobFile" { // job-file's body is the file
			r.Header.Set("Content-Type", "application/json")
		}
		if len(bytes.TrimSpace(body)) > 0 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") && !jx.Valid(body) {
			a.writeProblem(w, r, jsonError(body))
			return op
		}
		if e := checkBodyText(op, r.Header.Get("Content-Type"), body); e != nil {
			a.writeProblem(w, r, e)
			return op
		}
		body, ctx = liftInput(ctx, op, body)
		r.Body = &readBuffer{b: body}
		if op == "runJob" && a.cfg.TracerProvider == nil && a.serveRun(w, r, ctx, route, body) { // runfast.go
			return op
		}
	}
	a.oas.ServeHTTP(w, innerRequest(headAsGet(r), ctx, op))
	return op
}

// refuseResult fails a job whose result was too large to read, so it does not vanish: the
// worker drops a result refused with a 4xx. args are the route's endpoint, worker and job ids.
func (a *API) refuseResult(r *http.Request, args []string, limit int64) {
	if a.cfg.Jobs == nil || len(args) != 3 {
		return
	}
	if a.cfg.Jobs.AuthWorker(r.Context(), strings.TrimSpace(r.Header.Get("Authorization")), args[0], args[1]) != nil {
		return
	}
	_ = a.cfg.Jobs.Done(r.Context(), args[0], args[1], args[2], core.Result{TooLarge: limit + 1})
}

func bodyCap(op string) int64 {
	switch op {
	case "runJob":
		return RunBodyCap
	case "runSyncJob":
		return RunSyncBodyCap
	case "workerJobDone", "workerJobStream", "workerJobFile":
		return WorkerBodyCap
	}
	return DefaultBodyCap
}

func isWorkerOp(op string) bool { return strings.HasPrefix(op, "worker") }

// traceContext reads W3C traceparent headers.
var traceContext propagation.TraceContext

// writerKey carries the http.ResponseWriter to the security handler, which sets the rate-limit
// headers before ogen writes the response.
type writerKey struct{}

func headerOf(ctx context.Context) http.Header {
	if w, ok := ctx.Value(writerKey{}).(http.ResponseWriter); ok {
		return w.Header()
	}
	return http.Header{}
}

func (a *API) notFound(w http.ResponseWriter, r *http.Request) {
	a.writeProblem(w, r, core.Errorf(core.KindNotFound, "no operation at %s", r.URL.Path))
}

func (a *API) methodNotAllowed(w http.ResponseWriter, r *http.Request, allowed string) {
	if allowed == http.MethodGet && headable(r.URL.Path) { // the router knows only the GET
		allowed = HeadAllow
	}
	w.Header().Set("Allow", allowed)
	a.writeProblem(w, r, &core.Error{Kind: kindMethodNotAllowed, Detail: r.Method + " is not allowed here; allowed: " + allowed})
}

// byteSize renders a byte count the way people read limits ("10 MB").
func byteSize(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
