package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/gantryhq/gantry/core"
)

// Defaults of the body-reading bounds (Config.BodyReadTimeout, Config.BodyBudget).
const (
	// DefaultBodyReadTimeout is how long one request body may take to arrive.
	DefaultBodyReadTimeout = 60 * time.Second
	// DefaultBodyBudget is how many request-body bytes all requests together may hold at once.
	DefaultBodyBudget = 256 << 20
	// BodyBusyRetryAfter is the Retry-After, in seconds, of a request refused because the
	// body budget is spent.
	BodyBusyRetryAfter = 1
)

// errBodyBudget is readBody's error when the request's body does not fit in what is left of the
// server-wide body budget.
var errBodyBudget = errors.New("the server's request-body budget is spent")

// readBody reads a request body whole, under the operation's cap (a *http.MaxBytesError past
// it), the body read deadline (an error that isBodyTimeout recognises) and the server-wide
// budget of body bytes in flight (errBodyBudget). A body with a Content-Length is reserved and
// refused before any of it is read, and read into one buffer of its exact size; a chunked one
// is reserved as its buffer grows. held is what the caller must give back (a.release) once the
// request is done with the body, errors included.
func (a *API) readBody(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, held int64, err error) {
	if r.ContentLength > limit {
		return nil, 0, &http.MaxBytesError{Limit: limit}
	}
	if t := a.cfg.BodyReadTimeout; t > 0 {
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(t)) == nil {
			// Lift it once the body is in: net/http's background read of the connection,
			// which notices a caller going away, must not time out a long poll or a runsync.
			// A body not read whole keeps it (closeUnread).
			defer func() {
				if err == nil {
					_ = rc.SetReadDeadline(time.Time{})
				}
			}()
		}
	}
	if n := r.ContentLength; n >= 0 {
		if !a.reserve(n) {
			return nil, 0, errBodyBudget
		}
		body = make([]byte, n)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, n, err
		}
		return body, n, nil
	}
	// Chunked: grow the buffer by doubling, reserving each size before allocating it.
	body = []byte{}
	for {
		if len(body) == cap(body) {
			if int64(len(body)) > limit {
				return nil, held, &http.MaxBytesError{Limit: limit}
			}
			size := min(max(2*int64(cap(body)), 32<<10), limit+1)
			if !a.reserve(size) {
				return nil, held, errBodyBudget
			}
			a.release(held)
			held = size
			body = append(make([]byte, 0, size), body...)
		}
		n, err := r.Body.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if err == io.EOF {
			if int64(len(body)) > limit {
				return nil, held, &http.MaxBytesError{Limit: limit}
			}
			return body, held, nil
		}
		if err != nil {
			return nil, held, err
		}
	}
}

// reserve takes n bytes of the body budget, unless that would overspend it.
func (a *API) reserve(n int64) bool {
	budget := a.cfg.BodyBudget
	if budget <= 0 {
		return true
	}
	for {
		cur := a.inflight.Load()
		if cur+n > budget {
			return false
		}
		if a.inflight.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// release gives back n bytes of the body budget.
func (a *API) release(n int64) {
	if n != 0 && a.cfg.BodyBudget > 0 {
		a.inflight.Add(-n)
	}
}

// BodyBytesInFlight reports the request-body bytes held now against the budget.
func (a *API) BodyBytesInFlight() int64 { return a.inflight.Load() }

// isBodyTimeout reports whether a body read failed on the read deadline.
func isBodyTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// readError is the answer to a body readBody could not read (other than one too large).
func (a *API) readError(w http.ResponseWriter, err error) *core.Error {
	switch {
	case errors.Is(err, errBodyBudget):
		return &core.Error{Kind: core.KindUnavailable, RetryAfter: BodyBusyRetryAfter,
			Detail: "the server is holding as many request bodies as it may; retry shortly"}
	case isBodyTimeout(err):
		return &core.Error{Kind: kindRequestTimeout, Detail: "the body did not arrive within " + a.cfg.BodyReadTimeout.String()}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return core.Errorf(core.KindMalformed, "the body ended before its Content-Length")
	}
	return core.Errorf(core.KindMalformed, "reading the body: %v", err)
}

// closeUnread closes the connection after an answer given without reading the request's whole
// body, and ends the reading of it: net/http would otherwise read what is left (up to 256 KB)
// before answering and again when closing the body, which a caller that stalls its upload
// makes wait forever.
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
}

// readBuffer is the body handed on to the generated server once readBody has read it: it lets
// go of the bytes when read to the end, so the request does not keep a second copy of a body
// the generated server has copied.
type readBuffer struct{ b []byte }

func (rb *readBuffer) Read(p []byte) (int, error) {
	if len(rb.b) == 0 {
		rb.b = nil
		return 0, io.EOF
	}
	n := copy(p, rb.b)
	rb.b = rb.b[n:]
	return n, nil
}

func (rb *readBuffer) Close() error { return nil }

// Len is the bytes left to read: a produced file's size, known before it is stored.
func (rb *readBuffer) Len() int { return len(rb.b) }

// bodyHolder lets a handler reach the request the generated server decoded its body from.
type bodyHolder struct{ r *http.Request }

type bodyHolderKey struct{}

// innerRequest is r with ctx, for the generated server. A runsync request lives until its job
// ends, so its context also carries what releaseBody needs to let go of the generated
// server's copy of the body once it is decoded.
func innerRequest(r *http.Request, ctx context.Context, opID string) *http.Request {
	if opID != "runSyncJob" {
		return r.WithContext(ctx)
	}
	h := &bodyHolder{}
	in := r.WithContext(context.WithValue(ctx, bodyHolderKey{}, h))
	h.r = in
	return in
}

// releaseBody drops the request's decoded body (the generated server keeps it as the
// request's Body), so a handler that waits long holds only the copy it uses.
func releaseBody(ctx context.Context) {
	if h, ok := ctx.Value(bodyHolderKey{}).(*bodyHolder); ok && h.r != nil {
		h.r.Body = http.NoBody
		h.r = nil
	}
}
