// Package echo is gantry/echo, the built-in test worker: it answers each job according to
// instructions in the job's input, so that clients, endpoints and the platform itself can be
// exercised end to end without a GPU or a model.
//
// The input is a JSON object; every field is optional and the steps run in this order:
//
//	"sleep_ms": N          wait N milliseconds (0..86400000) first; a cancelled job ends at once
//	"progress": [a, b, …]  post each value as a progress update, in order
//	"stream": [a, b, …]    stream each value as one part, in order; the output is then the
//	                       array of the parts (the aggregate of the stream)
//	"error": "msg"         fail the job with msg (after the steps above)
//	"echo": X              output X
//
// Without "echo", "stream" or "error" the output is the whole input object. When both "stream"
// and "echo" are present the output is the stream's aggregate, as the protocol asks of a
// streaming job. Other fields are ignored, so a job may carry any payload to echo back.
//
// Examples of inputs and the job's result:
//
//	{"echo": "hi"}                          COMPLETED, output "hi"
//	{"prompt": "x"}                         COMPLETED, output {"prompt": "x"}
//	{"sleep_ms": 2000, "progress": [50]}    after 2 s one progress update 50, then the input
//	{"stream": ["a", "b"]}                  stream chunks "a" and "b", output ["a", "b"]
//	{"error": "boom"}                       FAILED, error "boom"
package echo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/worker"
)

// maxSleep bounds "sleep_ms".
const maxSleep = 24 * time.Hour

// input is the part of a job's input the echo worker reads.
type input struct {
	SleepMS  *int64            `json:"sleep_ms"`
	Progress []json.RawMessage `json:"progress"`
	Stream   []json.RawMessage `json:"stream"`
	Error    *string           `json:"error"`
}

// Handler is the gantry/echo handler (a [worker.Handler]); the package documentation
// describes the input it understands.
func Handler(ctx context.Context, job *worker.Job, r worker.Responder) (any, error) {
	raw := job.Input
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, errors.New("echo: the input must be a JSON object")
	}
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("echo: %w", describe(err))
	}
	if in.SleepMS != nil {
		ms := *in.SleepMS
		if ms < 0 || ms > maxSleep.Milliseconds() {
			return nil, fmt.Errorf("echo: sleep_ms %d is out of range (0..%d)", ms, maxSleep.Milliseconds())
		}
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	for i, p := range in.Progress {
		if err := r.Progress(ctx, p); err != nil {
			return nil, fmt.Errorf("echo: posting progress update %d: %w", i, err)
		}
	}
	for i, p := range in.Stream {
		if err := r.Stream(ctx, p); err != nil {
			return nil, fmt.Errorf("echo: streaming part %d: %w", i, err)
		}
	}
	if in.Error != nil {
		return nil, errors.New(*in.Error)
	}
	if in.Stream != nil {
		return in.Stream, nil
	}
	if x, ok := fields["echo"]; ok {
		return x, nil
	}
	return raw, nil
}

// describe names the field of a JSON type error.
func describe(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("%s: want %s, got JSON %s", te.Field, goType(te.Type.String()), te.Value)
	}
	return err
}

// goType names a Go type of the input struct the way the package documentation does.
func goType(t string) string {
	switch t {
	case "int64":
		return "an integer"
	case "string":
		return "a string"
	case "[]json.RawMessage":
		return "an array"
	}
	return t
}

var _ worker.Handler = Handler
