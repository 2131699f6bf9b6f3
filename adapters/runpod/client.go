package runpod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/adapters/runpod/rpapi"
)

// APIError is an error answer of RunPod's API.
type APIError struct {
	Op     string // the operation: "createPod", "podAction stop", ...
	Status int
	Detail string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("RunPod %s: %d %s: %s", e.Op, e.Status, http.StatusText(e.Status), e.Detail)
}

// apiError turns an error answer into an *APIError.
func apiError(op string, p *rpapi.ProblemStatusCodeWithHeaders) error {
	detail := p.Response.Detail
	if len(p.Response.Errors) > 0 {
		detail += " (" + strings.Join(p.Response.Errors, "; ") + ")"
	}
	return &APIError{Op: op, Status: p.StatusCode, Detail: detail}
}

// unexpected is an answer the subset does not describe.
func unexpected(op string, res any) error {
	return fmt.Errorf("RunPod %s: unexpected answer %T", op, res)
}

func statusOf(err error) int {
	var e *APIError
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// isAuth reports a call refused for the key: 401, or 403 (the key lacks the permission).
func isAuth(err error) bool {
	s := statusOf(err)
	return s == http.StatusUnauthorized || s == http.StatusForbidden
}

func isNotFound(err error) bool { return statusOf(err) == http.StatusNotFound }
func isConflict(err error) bool { return statusOf(err) == http.StatusConflict }

// capacityPhrases are what RunPod's details say when a GPU could not be placed: a 400 carries
// no code of its own for it, only a human-readable detail.
var capacityPhrases = []string{"no longer any instances", "no instances", "not enough", "capacity", "no free gpu", "not available", "out of stock"}

// isCapacity reports a create or start refused for lack of machines (a 400 whose detail says
// so, or a 5xx placing the pod).
func isCapacity(err error) bool {
	var e *APIError
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
		return false
	}
	d := strings.ToLower(e.Detail)
	for _, p := range capacityPhrases {
		if strings.Contains(d, p) {
			return true
		}
	}
	return false
}

// pacer is the API client's transport: it spaces requests as RunPod's answers ask. A 429 is
// retried after its Retry-After (after 1, 2, 4 s when it has none), up to maxAttempts; a
// RateLimit header with a window at r=0 holds every request until that window's reset (t
// seconds). Waits end early when the request's context is done.
type pacer struct {
	next http.RoundTripper
	gate *gate
}

// gate is the pacing state the pool's clients share: RunPod limits the account, not a
// connection.
type gate struct {
	mu    sync.Mutex
	until time.Time // no request before this
}

// pacing bounds.
const (
	maxAttempts = 4
	maxWait     = 2 * time.Minute // the longest single wait honoured
)

func (p *pacer) RoundTrip(req *http.Request) (*http.Response, error) {
	for attempt := 1; ; attempt++ {
		if err := p.wait(req.Context()); err != nil {
			return nil, err
		}
		if attempt > 1 && req.Body != nil {
			if req.GetBody == nil {
				return nil, errors.New("rate-limited request cannot be sent again: no GetBody")
			}
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
		resp, err := p.next.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		p.observe(resp, attempt)
		if resp.StatusCode != http.StatusTooManyRequests || attempt >= maxAttempts {
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}
}

// wait holds until the pacer allows a request, or ctx is done.
func (p *pacer) wait(ctx context.Context) error {
	p.gate.mu.Lock()
	d := time.Until(p.gate.until)
	p.gate.mu.Unlock()
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// observe reads an answer's pacing headers.
func (p *pacer) observe(resp *http.Response, attempt int) {
	var d time.Duration
	if resp.StatusCode == http.StatusTooManyRequests {
		d = time.Second << (attempt - 1)
		if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s >= 0 {
			d = time.Duration(s) * time.Second
		}
	}
	if exhausted, ok := resetAfter(resp.Header.Get("RateLimit")); ok {
		d = max(d, exhausted)
	}
	if d <= 0 {
		return
	}
	d = min(d, maxWait)
	p.gate.mu.Lock()
	defer p.gate.mu.Unlock()
	if until := time.Now().Add(d); until.After(p.gate.until) {
		p.gate.until = until
	}
}

// resetAfter reads a RateLimit header (`"minute";r=0;t=12, "hour";r=2800;t=1812`): the
// longest reset among the windows with nothing remaining, and whether there is one.
func resetAfter(h string) (time.Duration, bool) {
	var longest time.Duration
	found := false
	for member := range strings.SplitSeq(h, ",") {
		r, t := -1, -1
		params := strings.Split(member, ";")
		for _, kv := range params[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				continue
			}
			switch k {
			case "r":
				r = n
			case "t":
				t = n
			}
		}
		if r == 0 && t >= 0 {
			found = true
			longest = max(longest, time.Duration(t)*time.Second)
		}
	}
	return longest, found
}

// The API calls, each turning error answers into *APIError.

func (p *Pool) getPod(ctx context.Context, id string) (*rpapi.Pod, error) {
	res, err := p.api.GetPod(ctx, rpapi.GetPodParams{ID: id})
	if err != nil {
		return nil, fmt.Errorf("RunPod getPod %s: %w", id, err)
	}
	switch r := res.(type) {
	case *rpapi.PodHeaders:
		p.noteHealth(nil)
		return &r.Response, nil
	case *rpapi.ProblemStatusCodeWithHeaders:
		err := apiError("getPod "+id, r)
		p.noteHealth(err)
		return nil, err
	}
	return nil, unexpected("getPod", res)
}

func (p *Pool) listPods(ctx context.Context) ([]rpapi.Pod, error) {
	res, err := p.bg.ListPods(ctx, rpapi.ListPodsParams{})
	if err != nil {
		return nil, fmt.Errorf("RunPod listPods: %w", err)
	}
	switch r := res.(type) {
	case *rpapi.PodListHeaders:
		p.noteHealth(nil)
		return r.Response.Pods, nil
	case *rpapi.ProblemStatusCodeWithHeaders:
		err := apiError("listPods", r)
		p.noteHealth(err)
		return nil, err
	}
	return nil, unexpected("listPods", res)
}

func (p *Pool) createPod(ctx context.Context, req *rpapi.CreatePod) (*rpapi.Pod, error) {
	res, err := p.api.CreatePod(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("RunPod createPod: %w", err)
	}
	switch r := res.(type) {
	case *rpapi.PodHeaders:
		p.noteHealth(nil)
		return &r.Response, nil
	case *rpapi.ProblemStatusCodeWithHeaders:
		err := apiError("createPod", r)
		p.noteHealth(err)
		return nil, err
	}
	return nil, unexpected("createPod", res)
}

// action applies an action to a pod: the pod after it (nil after terminate).
func (p *Pool) action(ctx context.Context, id string, a rpapi.PodAction) (*rpapi.Pod, error) {
	op := "podAction " + string(a) + " " + id
	res, err := p.api.PodAction(ctx, &rpapi.PodActionRequest{Action: a}, rpapi.PodActionParams{ID: id})
	if err != nil {
		return nil, fmt.Errorf("RunPod %s: %w", op, err)
	}
	switch r := res.(type) {
	case *rpapi.PodHeaders:
		p.noteHealth(nil)
		return &r.Response, nil
	case *rpapi.PodActionNoContent:
		p.noteHealth(nil)
		return nil, nil
	case *rpapi.ProblemStatusCodeWithHeaders:
		err := apiError(op, r)
		p.noteHealth(err)
		return nil, err
	}
	return nil, unexpected(op, res)
}

// deletePod terminates a pod through c (p.api, or p.bg from the watch loop).
func (p *Pool) deletePod(ctx context.Context, c *rpapi.Client, id string) error {
	res, err := c.DeletePod(ctx, rpapi.DeletePodParams{ID: id})
	if err != nil {
		return fmt.Errorf("RunPod deletePod %s: %w", id, err)
	}
	switch r := res.(type) {
	case *rpapi.DeletePodNoContent:
		p.noteHealth(nil)
		return nil
	case *rpapi.ProblemStatusCodeWithHeaders:
		err := apiError("deletePod "+id, r)
		p.noteHealth(err)
		return err
	}
	return unexpected("deletePod", res)
}
