package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	ht "github.com/ogen-go/ogen/http"
	"github.com/ogen-go/ogen/ogenerrors"
	"github.com/ogen-go/ogen/validate"

	"github.com/gantryhq/gantry/core"
)

// Kinds only the transport knows.
const (
	kindMethodNotAllowed core.Kind = 1000 + iota
	kindUnsupportedMediaType
	kindNotImplemented
	kindBadGateway
	kindRequestTimeout
	kindRedirect // a 307 to the clean form of a path (CleanPaths)
)

// problem is the application/problem+json body (spec 7). Error repeats Detail on job
// operations, where RunPod SDKs read it.
type problem struct {
	Type   string   `json:"type,omitempty"`
	Title  string   `json:"title"`
	Status int      `json:"status"`
	Detail string   `json:"detail"`
	Errors []string `json:"errors,omitempty"`
	Error  string   `json:"error,omitempty"`
}

func statusOf(k core.Kind) int {
	switch k {
	case core.KindInvalid:
		return http.StatusUnprocessableEntity
	case core.KindMalformed:
		return http.StatusBadRequest
	case core.KindUnauthorized:
		return http.StatusUnauthorized
	case core.KindForbidden:
		return http.StatusForbidden
	case core.KindNotFound:
		return http.StatusNotFound
	case core.KindConflict:
		return http.StatusConflict
	case core.KindTooLarge:
		return http.StatusRequestEntityTooLarge
	case core.KindRateLimited:
		return http.StatusTooManyRequests
	case core.KindUnavailable:
		return http.StatusServiceUnavailable
	case kindMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case kindUnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	case kindNotImplemented:
		return http.StatusNotImplemented
	case kindBadGateway:
		return http.StatusBadGateway
	case kindRequestTimeout:
		return http.StatusRequestTimeout
	case kindRedirect:
		return http.StatusTemporaryRedirect
	}
	return http.StatusInternalServerError
}

// renderError is the one place a failure becomes a response: ogen hands it security, parameter,
// body and handler errors alike.
func (a *API) renderError(ctx context.Context, w http.ResponseWriter, r *http.Request, err error) {
	if e := typeError(r, err); e != nil {
		a.writeProblem(w, r, e)
		return
	}
	a.writeProblem(w, r, bodyOffsets(ctx, err, toCoreError(err)))
}

// toCoreError classifies any error the generated server or a handler returns.
func toCoreError(err error) *core.Error {
	var ce *core.Error
	var sec *ogenerrors.SecurityError
	var params *ogenerrors.DecodeParamsError
	var body *ogenerrors.DecodeRequestError
	var ctype *validate.InvalidContentTypeError
	switch {
	case errors.As(err, &ce):
		return ce
	case errors.As(err, &sec):
		return &core.Error{Kind: core.KindUnauthorized, Detail: core.MissingKeyDetail}
	case errors.Is(err, ht.ErrNotImplemented):
		return &core.Error{Kind: kindNotImplemented, Detail: "this operation is not implemented yet"}
	case errors.As(err, &ctype):
		return &core.Error{Kind: kindUnsupportedMediaType, Detail: fmt.Sprintf("the body must be application/json, not %q", ctype.ContentType)}
	case errors.Is(err, validate.ErrBodyRequired):
		return core.Errorf(core.KindMalformed, "a JSON body is required")
	case errors.As(err, &params):
		return paramError(params)
	case errors.As(err, &body):
		fields := fieldErrors(body.Err, "$")
		e := core.Invalid(fields...)
		return e
	}
	return core.Internal("unexpected failure", err)
}

// paramError reports a bad path or query parameter: 422 when it parsed but broke a rule, 400
// when it could not be parsed.
func paramError(e *ogenerrors.DecodeParamsError) *core.Error {
	var pe *ogenerrors.DecodeParamError
	name := "parameter"
	if errors.As(e, &pe) {
		name = string(pe.In) + "." + pe.Name
	}
	var ve *validate.Error
	if errors.As(e, &ve) || isConstraint(e) {
		msg := leafMessage(innermost(e))
		return core.Invalid(core.FieldError{Path: name, Message: msg})
	}
	return &core.Error{Kind: core.KindMalformed, Detail: fmt.Sprintf("%s: %s", name, "cannot be parsed: "+innermost(e).Error()),
		Fields: []core.FieldError{{Path: name, Message: "cannot be parsed"}}}
}

var constraintRE = regexp.MustCompile(`^value \S+ (less|greater) than`)

func isConstraint(err error) bool {
	msg := innermost(err).Error()
	return constraintRE.MatchString(msg) || strings.HasPrefix(msg, "invalid value")
}

func innermost(err error) error {
	for {
		next := unwrapOne(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// unwrapOne steps one level down a chain, through errors.Join of a single error too (ogen joins
// decode errors with the body's close error).
func unwrapOne(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		if errs := j.Unwrap(); len(errs) == 1 {
			return errs[0]
		}
		return nil
	}
	return errors.Unwrap(err)
}

var (
	decodeFieldRE = regexp.MustCompile(`^decode field "([^"]*)"$`)
	unexpectedRE  = regexp.MustCompile(`^unexpected field "([^"]*)"$`)
	lessRE        = regexp.MustCompile(`^value (\S+) less than (?:minimum )?(\S+)$`)
	greaterRE     = regexp.MustCompile(`^value (\S+) greater than (?:maximum )?(\S+)$`)
)

// discriminators names the variants of each oneOf in request bodies, by JSON path.
var discriminators = map[string]string{"$.scaling": "QUEUE_DELAY or REQUEST_COUNT"}

// fieldErrors turns a body decode or validation error into JSON-path failures. ogen wraps a
// nested decode failure once per level ("decode field \"gpu\": ..."), and reports constraint
// failures as a tree of *validate.Error; both are walked down to the leaf.
func fieldErrors(err error, path string) []core.FieldError {
	for err != nil {
		var ve *validate.Error
		if v, ok := err.(*validate.Error); ok {
			ve = v
		}
		if ve != nil {
			var out []core.FieldError
			for _, f := range ve.Fields {
				p := path + "." + f.Name
				if strings.HasPrefix(f.Name, "[") {
					p = path + f.Name
				}
				out = append(out, fieldErrors(f.Error, p)...)
			}
			return out
		}
		next := unwrapOne(err)
		own := err.Error()
		if next != nil {
			own = strings.TrimSuffix(own, ": "+next.Error())
		}
		if m := decodeFieldRE.FindStringSubmatch(own); m != nil {
			path += "." + m[1]
		} else if m := unexpectedRE.FindStringSubmatch(own); m != nil {
			return []core.FieldError{{Path: path + "." + m[1], Message: "unknown property"}}
		}
		if next == nil {
			if alts, ok := discriminators[path]; ok && (own == "unable to detect sum type variant" || strings.HasPrefix(own, "unknown type ")) {
				got := strings.TrimPrefix(own, "unknown type ")
				if got == own {
					return []core.FieldError{{Path: path + ".type", Message: "is required (" + alts + ")"}}
				}
				return []core.FieldError{{Path: path + ".type", Message: fmt.Sprintf("must be %s (got %q)", alts, got)}}
			}
			return []core.FieldError{{Path: path, Message: leafMessage(err)}}
		}
		err = next
	}
	return nil
}

// leafMessage words one failure for a person.
func leafMessage(err error) string {
	var minLen *validate.MinLengthError
	var maxLen *validate.MaxLengthError
	var regex *validate.NoRegexMatchError
	switch {
	case errors.Is(err, validate.ErrFieldRequired):
		return "is required"
	case errors.As(err, &minLen):
		if minLen.MinLength == 1 {
			return "must not be empty"
		}
		return fmt.Sprintf("must have at least %d characters or items", minLen.MinLength)
	case errors.As(err, &maxLen):
		return fmt.Sprintf("must have at most %d characters or items", maxLen.MaxLength)
	case errors.As(err, &regex):
		return fmt.Sprintf("does not match the pattern %s", regex.Pattern)
	}
	msg := err.Error()
	if m := lessRE.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("must be at least %s (got %s)", trimNum(m[2]), trimNum(m[1]))
	}
	if m := greaterRE.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("must be at most %s (got %s)", trimNum(m[2]), trimNum(m[1]))
	}
	if strings.Contains(msg, "invalid value") {
		return msg
	}
	if strings.HasPrefix(msg, "unexpected byte") || strings.Contains(msg, "unexpected") {
		return "has the wrong type (" + msg + ")"
	}
	return msg
}

func trimNum(s string) string {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return s
}

// writeProblem renders err as application/problem+json.
func (a *API) writeProblem(w http.ResponseWriter, r *http.Request, e *core.Error) {
	status := statusOf(e.Kind)
	p := problem{Title: http.StatusText(status), Status: status, Detail: e.Detail}
	if e.Kind == core.KindInternal {
		a.cfg.Log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", e)
		p.Detail = "an internal error occurred; it has been logged"
	}
	for _, f := range e.Fields {
		p.Errors = append(p.Errors, f.String())
	}
	if route, ok := a.oas.FindPath(r.Method, r.URL); (ok && isJobOp(route.OperationID())) || strings.HasPrefix(r.URL.Path, LBPrefix) {
		p.Error = p.Detail
	}
	if e.Kind == core.KindRateLimited || e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(e.RetryAfter, 10))
	}
	if e.Kind == core.KindUnauthorized {
		w.Header().Del("RateLimit")
		w.Header().Del("RateLimit-Policy")
		w.Header().Set("WWW-Authenticate", `Bearer realm="gantry"`)
	}
	body, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
