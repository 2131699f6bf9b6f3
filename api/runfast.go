package api

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/go-faster/jx"

	"github.com/gantryhq/gantry/oas"
)

// The generated server wraps each operation in tracing and metrics (a span, attribute sets, a
// status recorder, a timer) and decodes the path through a general parameter decoder: on 2
// cores that was about a tenth of a durable /run's CPU, for telemetry nothing reads. So a
// well-formed run is answered here, the way the generated server answers it; anything else
// (a body or path it would refuse, or a caller not authenticated yet) goes on to it, so that
// every refusal stays exactly its refusal.

// serveRun answers POST /v2/{endpointId}/run when the generated server would accept it as it
// is: its endpoint id plain, its body application/json that decodes and validates as a
// JobRequest, its caller authenticated by preauthenticate. body is what readBody read (input
// lifted out, as the generated server would see it). It returns false, having written
// nothing, for any other request.
func (a *API) serveRun(w http.ResponseWriter, r *http.Request, ctx context.Context, route oas.Route, body []byte) bool {
	args := route.Args()
	if len(args) != 1 || !plainEndpointID(args[0]) || r.Header.Get("Content-Type") != "application/json" || principalOf(ctx) == nil {
		return false
	}
	var req oas.JobRequest
	d := jx.DecodeBytes(body)
	if req.Decode(d) != nil || d.Skip() != io.EOF || req.Validate() != nil {
		return false
	}
	res, err := a.h.RunJob(ctx, &req, oas.RunJobParams{EndpointId: args[0]})
	if err == nil {
		err = writeJobAck(w, res)
	}
	if err != nil {
		a.renderError(ctx, w, r.WithContext(ctx), err)
	}
	return true
}

// plainEndpointID reports whether a path segment is an endpoint id the generated path decoder
// takes as it is: 1 to 128 letters, digits, '-' or '_' (no escapes, no commas).
func plainEndpointID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// errUnexpectedAnswer is writeJobAck's error for an answer RunJob does not give.
var errUnexpectedAnswer = errors.New("run answered with an unexpected type")

// The ack's header values, shared by every answer rather than made for each: net/http only
// reads them, and a later Set or Add replaces the slice (its capacity is its length).
var (
	ackContentType   = []string{"application/json; charset=utf-8"}
	ackExposeHeaders = []string{"Ratelimit,Ratelimit-Policy"}
)

// writeJobAck writes RunJob's answer as the generated encoder does: the JSON headers, 200 and
// the ack. RunJob sets the RateLimit headers itself (on the writer), never in the response.
func writeJobAck(w http.ResponseWriter, res oas.RunJobRes) error {
	ack, ok := res.(*oas.JobAckHeaders)
	if !ok {
		return errUnexpectedAnswer
	}
	if err := ack.Validate(); err != nil {
		return err
	}
	h := w.Header()
	h["Content-Type"], h["Access-Control-Expose-Headers"] = ackContentType, ackExposeHeaders
	w.WriteHeader(http.StatusOK)
	e := jx.GetEncoder()
	defer jx.PutEncoder(e)
	ack.Response.Encode(e)
	_, _ = w.Write(e.Bytes())
	return nil
}
