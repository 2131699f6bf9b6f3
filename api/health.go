package api

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/gantryhq/gantry/core"
)

// StoreCheckTTL is how long /healthz keeps the answer of Config.StoreCheck: a storm of probes
// costs the store at most one check a second per replica.
const StoreCheckTTL = time.Second

// StoreCheckTimeout bounds one store check: a store that takes longer is down.
const StoreCheckTimeout = 2 * time.Second

// storeHealth is the last answer of Config.StoreCheck. Its lock is held through a check, so
// that probes arriving meanwhile wait for that check's answer rather than start their own.
type storeHealth struct {
	mu      sync.Mutex
	checked bool
	at      time.Time // when the last check ended
	err     error
}

// storeErr returns the store check's answer, at most StoreCheckTTL old; nil without a check.
func (a *API) storeErr(ctx context.Context) error {
	if a.cfg.StoreCheck == nil {
		return nil
	}
	h := &a.storeHealth
	h.mu.Lock()
	defer h.mu.Unlock()
	if now := a.cfg.Clock.Now(); h.checked && !now.Before(h.at) && now.Sub(h.at) < StoreCheckTTL {
		return h.err
	}
	// Not the probe's own context: a probe that hangs up must not fail the check the others wait on.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StoreCheckTimeout)
	err := a.cfg.StoreCheck(cctx)
	cancel()
	switch {
	case err != nil && h.err == nil:
		a.cfg.Log.Error("the store cannot be reached: /healthz answers 503", "err", err)
	case err == nil && h.err != nil:
		a.cfg.Log.Info("the store answers again: /healthz answers 200")
	}
	h.checked, h.at, h.err = true, a.cfg.Clock.Now(), err
	return err
}

// serveHealthz answers /healthz: 200 when the server is ready and its store answers; else 503
// problem+json (with Retry-After when the store is down), which tells a load balancer to send
// this replica nothing for now.
func (a *API) serveHealthz(w http.ResponseWriter, r *http.Request) {
	if !a.healthzMethod(w, r) {
		return
	}
	if !a.ready.Load() {
		a.writeProblem(w, r, &core.Error{Kind: core.KindUnavailable, Detail: a.notReady()})
		return
	}
	if err := a.storeErr(r.Context()); err != nil {
		// The cause is logged, not shown: /healthz takes no key, and it names hosts and users.
		a.writeProblem(w, r, &core.Error{Kind: core.KindUnavailable, RetryAfter: core.StoreRetryAfter,
			Detail: "the store cannot be reached: this server cannot serve requests now"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}

// serveLivez answers /livez: 200 while this process serves HTTP, whatever its store or
// readiness says. It is the liveness probe's route: a process whose store is down, or that is
// draining, is alive, and restarting it would not help (/healthz tells a load balancer those).
func (a *API) serveLivez(w http.ResponseWriter, r *http.Request) {
	if !a.healthzMethod(w, r) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"alive"}` + "\n"))
}
