package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/ogen-go/ogen/ogenerrors"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// scheme is how an operation authenticates (openapi.yaml's security of the operation).
type scheme int

const (
	schemeNone   scheme = iota // no credentials (signed file links)
	schemeBearer               // management: "Authorization: Bearer <key>"
	schemeJobKey               // job operations: the key, with or without "Bearer "
	schemeWorker               // worker protocol: the worker's token, checked against the route
)

// schemeOf returns the security scheme of an operation, by its ogen name.
func schemeOf(op oas.OperationName, opID string) scheme {
	switch {
	case isWorkerOp(opID):
		return schemeWorker
	case op == oas.GetFileOperation, op == oas.GetOpenAPIOperation:
		return schemeNone
	}
	if a, ok := access[op]; ok && (a == core.JobRead || a == core.JobWrite) {
		return schemeJobKey
	}
	return schemeBearer
}

// workerAuthed is what the worker-token context key holds once preauthenticate has checked the
// token against the route's endpoint and worker: the handlers do not check it again.
type workerAuthed struct{}

// preauthenticate authenticates a routed request from its headers alone, before anything reads
// its body: a caller without a valid key (or worker token) costs a map lookup, not the upload.
// It counts the request against the rate limit and checks the key's scope exactly as the
// security handlers do, and leaves the outcome in the returned context, where they find it and
// neither look the key up nor count the request a second time. The error is the one the
// generated server would have answered.
func (a *API) preauthenticate(ctx context.Context, r *http.Request, route oas.Route) (context.Context, error) {
	op := oas.OperationName(route.Name())
	switch schemeOf(op, route.OperationID()) {
	case schemeBearer:
		key, ok := bearerToken(r.Header)
		if !ok {
			return ctx, errNoCredentials
		}
		return a.h.authenticate(ctx, op, key)
	case schemeJobKey:
		v := r.Header.Get("Authorization")
		if v == "" {
			return ctx, errNoCredentials
		}
		return a.h.authenticate(ctx, op, bearerless(v))
	case schemeWorker:
		v := r.Header.Get("Authorization")
		if v == "" {
			return ctx, errNoCredentials
		}
		args := route.Args()
		if a.cfg.Jobs == nil || len(args) < 2 {
			return ctx, nil // the handler decides, as before
		}
		if err := a.cfg.Jobs.AuthWorker(ctx, bearerless(v), args[0], args[1]); err != nil {
			return ctx, err
		}
		return context.WithValue(ctx, workerTokenKey{}, workerAuthed{}), nil
	}
	return ctx, nil
}

// errNoCredentials is the generated server's error for a request without usable credentials.
var errNoCredentials = &ogenerrors.SecurityError{Err: ogenerrors.ErrSecurityRequirementIsNotSatisfied}

// bearerToken finds "Authorization: Bearer <token>" among the request's Authorization values,
// as the generated server's bearer security does.
func bearerToken(h http.Header) (string, bool) {
	for _, v := range h["Authorization"] {
		if scheme, token, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return token, true
		}
	}
	return "", false
}
