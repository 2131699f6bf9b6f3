package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Bounds and delays of the transport.
const (
	pollTimeout    = 90 * time.Second       // one job-take or job-stop long-poll (servers hold ~30 s)
	minPingTimeout = time.Second            // one ping may take twice the ping interval, and at least this
	postTimeout    = 30 * time.Second       // one POST attempt
	finalTimeout   = 15 * time.Second       // posting a finished job's result once Run's context is done
	throttleDelay  = 5 * time.Second        // wait after a 429 from job-take
	backoffMin     = 100 * time.Millisecond // first delay after a failed job-take or job-stop
	backoffMax     = 5 * time.Second        // largest delay after failed job-takes or job-stops
	postAttempts   = 3                      // tries of one POST in all
	postRetryDelay = 100 * time.Millisecond // wait after the first failed POST attempt, doubled after each
	maxJobBytes    = 64 << 20               // largest job-take or job-stop answer read, in bytes
	maxErrorBytes  = 512                    // body excerpt kept in a StatusError, in bytes
)

// StatusError reports an HTTP status the worker did not expect from the server.
type StatusError struct {
	Op   string // the request: "job-take", "job-done", "job-stream", "job-file", "job-stop" or "ping"
	Code int    // the HTTP status code
	Body string // the start of the response body
}

// Error implements error.
func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%s: HTTP %d", e.Op, e.Code)
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// retryable reports whether a POST that failed with err may be tried again: connection errors
// and 5xx answers may be, 4xx answers may not.
func retryable(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code >= 500
	}
	return true
}

// withQuery appends the query parameters q (already encoded) to u with a bare "&", as the
// Python SDK does, or with "?" when u has no query yet.
func withQuery(u, q string) string {
	switch {
	case !strings.Contains(u, "?"):
		return u + "?" + q
	case strings.HasSuffix(u, "?"), strings.HasSuffix(u, "&"):
		return u + q
	}
	return u + "&" + q
}

// jobURL fills the $ID placeholder of a done or stream URL template.
func jobURL(template, id string) string {
	return strings.ReplaceAll(template, "$ID", url.PathEscape(id))
}

// fileURL derives the job-file URL template from the job-done one (Gantry's extension of the
// protocol). It returns "" when done has no /job-done/ segment.
func fileURL(done string) string {
	if !strings.Contains(done, "/job-done/") {
		return ""
	}
	return strings.Replace(done, "/job-done/", "/job-file/", 1)
}

// batchURL derives the job-take-batch URL from the job-take URL, as the runpod SDK does. It
// returns "" when take has no /job-take/ segment.
func batchURL(take string) string {
	if !strings.Contains(take, "/job-take/") {
		return ""
	}
	return strings.Replace(take, "/job-take/", "/job-take-batch/", 1)
}

// stopURL derives the job-stop URL from the job-take URL, as the Python SDK (>= 1.10) does.
// It returns "" when take has no /job-take/ segment.
func stopURL(take string) string {
	if !strings.Contains(take, "/job-take/") {
		return ""
	}
	return strings.Replace(take, "/job-take/", "/job-stop/", 1)
}

// do sends one request with the worker's headers. A non-nil body is sent as JSON.
func (r *runner) do(ctx context.Context, method, u string, body []byte) (*http.Response, error) {
	return r.doType(ctx, method, u, body, "application/json")
}

// doType sends one request with the worker's headers and a body of the given Content-Type.
func (r *runner) doType(ctx context.Context, method, u string, body []byte, ctype string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if r.cfg.Token != "" {
		req.Header.Set("Authorization", r.cfg.Token)
	}
	if body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("User-Agent", "gantry-worker")
	return r.cfg.Client.Do(req)
}

// statusError builds the StatusError for resp and consumes its body.
func statusError(op string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	return &StatusError{Op: op, Code: resp.StatusCode, Body: strings.TrimSpace(string(b))}
}

// discard drains (a bounded part of) and closes a response body so its connection is reused.
func discard(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}

// get sends a GET and returns the status: with the body (at most maxJobBytes) for a 200,
// alone for a 204 or a 429, and a *StatusError for any other.
func (r *runner) get(ctx context.Context, op, u string, timeout time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := r.do(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", op, err)
	}
	defer discard(resp)
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNoContent, http.StatusTooManyRequests:
		return resp.StatusCode, nil, nil
	default:
		return 0, nil, statusError(op, resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxJobBytes+1))
	if err != nil {
		return 0, nil, fmt.Errorf("%s: reading the answer: %w", op, err)
	}
	if len(b) > maxJobBytes {
		return 0, nil, fmt.Errorf("%s: answer larger than %d bytes", op, maxJobBytes)
	}
	return resp.StatusCode, b, nil
}

// post POSTs body to u, trying again on a connection error or a 5xx answer, postAttempts
// times in all. A 4xx answer is returned at once as a *StatusError.
func (r *runner) post(ctx context.Context, op, u string, body []byte) error {
	delay := postRetryDelay
	var err error
	for attempt := 1; ; attempt++ {
		err = r.postOnce(ctx, op, u, body)
		if err == nil || !retryable(err) || attempt == postAttempts || ctx.Err() != nil {
			break
		}
		r.cfg.Log.Debug("retrying post", "op", op, "attempt", attempt, "err", err)
		if r.cfg.sleep(ctx, delay) != nil {
			break
		}
		delay *= 2
	}
	return err
}

// postOnce makes one POST attempt.
func (r *runner) postOnce(ctx context.Context, op, u string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, postTimeout)
	defer cancel()
	resp, err := r.do(ctx, http.MethodPost, u, body)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer discard(resp)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return statusError(op, resp)
	}
	return nil
}

// backoff yields exponentially growing delays between backoffMin and backoffMax.
type backoff struct{ cur time.Duration }

// next returns the next delay.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = backoffMin
	} else {
		b.cur = min(2*b.cur, backoffMax)
	}
	return b.cur
}

// reset starts the delays over after a success.
func (b *backoff) reset() { b.cur = 0 }

// postFile POSTs a file's bytes to u, trying again as post does, and decodes the JSON answer
// into out.
func (r *runner) postFile(ctx context.Context, u string, data []byte, out any) error {
	delay := postRetryDelay
	for attempt := 1; ; attempt++ {
		err := r.postFileOnce(ctx, u, data, out)
		if err == nil || !retryable(err) || attempt == postAttempts || ctx.Err() != nil {
			return err
		}
		if r.cfg.sleep(ctx, delay) != nil {
			return err
		}
		delay *= 2
	}
}

func (r *runner) postFileOnce(ctx context.Context, u string, data []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, postTimeout)
	defer cancel()
	resp, err := r.doType(ctx, http.MethodPost, u, data, "application/octet-stream")
	if err != nil {
		return fmt.Errorf("job-file: %w", err)
	}
	defer discard(resp)
	if resp.StatusCode != http.StatusOK {
		return statusError("job-file", resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(out); err != nil {
		return fmt.Errorf("job-file: decoding the answer: %w", err)
	}
	return nil
}
