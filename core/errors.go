package core

import (
	"errors"
	"fmt"
	"strings"
)

// Kind classifies an Error; the api package maps each kind to one HTTP status.
type Kind int

// The kinds of error core returns.
const (
	KindInvalid      Kind = iota + 1 // 422: well-formed input that breaks a rule
	KindMalformed                    // 400: input that cannot be read
	KindUnauthorized                 // 401: no usable credential
	KindForbidden                    // 403: a valid credential without access
	KindNotFound                     // 404: missing, expired or not the caller's
	KindConflict                     // 409: the resource's state refuses the operation
	KindTooLarge                     // 413: a body over the operation's cap
	KindRateLimited                  // 429: a rate-limit window is exhausted
	KindUnavailable                  // 503: temporarily unable to serve
	KindInternal                     // 500: a fault of ours; the detail is never shown
)

// FieldError is one validation failure: Path is a JSON path into the request ("$.gpu.pools[1]").
type FieldError struct {
	Path    string
	Message string
}

// String renders the failure as "<json path>: <message>".
func (f FieldError) String() string { return f.Path + ": " + f.Message }

// Error is the typed error every core operation returns for a caller-visible failure.
type Error struct {
	Kind   Kind
	Detail string       // human-readable explanation, shown to the caller
	Fields []FieldError // validation failures, for KindInvalid and KindMalformed
	// RetryAfter is the number of seconds to wait, for KindRateLimited and KindUnavailable.
	RetryAfter int64
	// Err is the underlying cause, for KindInternal; never shown to the caller.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Detail + ": " + e.Err.Error()
	}
	if len(e.Fields) == 0 || len(e.Fields) == 1 && e.Detail == e.Fields[0].String() {
		return e.Detail // Invalid made the one field's error the detail: say it once
	}
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.String()
	}
	return e.Detail + " (" + strings.Join(parts, "; ") + ")"
}

func (e *Error) Unwrap() error { return e.Err }

// ErrNotFound is returned by stores for a missing record.
var ErrNotFound = errors.New("not found")

// Invalid returns a KindInvalid error listing the failures.
func Invalid(fields ...FieldError) *Error {
	detail := "the request failed validation"
	if len(fields) == 1 {
		detail = fields[0].String()
	}
	return &Error{Kind: KindInvalid, Detail: detail, Fields: fields}
}

// Errorf returns an error of the given kind with a formatted detail.
func Errorf(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// Internal wraps a fault of ours: the caller sees a generic detail, the log sees err.
func Internal(what string, err error) *Error {
	return &Error{Kind: KindInternal, Detail: what, Err: err}
}

// StoreRetryAfter is the Retry-After, in seconds, of a request refused because a store could
// not answer it.
const StoreRetryAfter = 1

// Unavailable wraps a store's failure to answer: an outage, not a fault of the request. The
// caller gets 503 with Retry-After (StoreRetryAfter), as a request the rate limiter cannot
// count does, so that one outage answers one status; err is for the log, never shown.
func Unavailable(what string, err error) *Error {
	return &Error{Kind: KindUnavailable, RetryAfter: StoreRetryAfter, Err: err,
		Detail: what + ": the store cannot answer now; retry in a second"}
}

// KindOf returns the kind of err, KindInternal for errors that are not *Error.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}
