// Package echo is gantry/echo, the built-in test worker: it answers each job according to
// instructions in the job's input, so that clients, endpoints and the platform itself can be
// exercised end to end without a GPU or a model.
//
// The input is a JSON object; every field is optional and the steps run in this order:
//
//	"progress": [a, b, …]  post each value as a progress update, in order
//	"stream": [a, b, …]    stream each value as one part, in order; the output is then the
//	                       array of the parts (the aggregate of the stream)
//	"sleep_ms": N          take N milliseconds (0..86400000) in all: with progress values or
//	                       stream parts, each one is posted first and an equal share of N
//	                       follows it (so a status or stream call in between sees it);
//	                       without, N is slept first. A cancelled job ends at once
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
//	{"sleep_ms": 2000, "progress": [50]}    progress update 50 at once (status shows it for
//	                                        2 s), then the input
//	{"sleep_ms": 3000, "stream": ["a", "b", "c"]}
//	                                        a part a second, output ["a", "b", "c"]
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
	var sleep time.Duration
	if in.SleepMS != nil {
		ms := *in.SleepMS
		if ms < 0 || ms > maxSleep.Milliseconds() {
			return nil, fmt.Errorf("echo: sleep_ms %d is out of range (0..%d)", ms, maxSleep.Milliseconds())
		}
		sleep = time.Duration(ms) * time.Millisecond
	}
	// Each step (a progress update, then a stream part) is posted, then its share of the sleep
	// follows, so that status and stream calls see the steps one by one while the job runs.
	steps := len(in.Progress) + len(in.Stream)
	if steps == 0 {
		if err := pause(ctx, sleep); err != nil {
			return nil, err
		}
	}
	share := func(i int) time.Duration { // step i's share: the shares add up to sleep exactly
		return sleep*time.Duration(i+1)/time.Duration(steps) - sleep*time.Duration(i)/time.Duration(steps)
	}
	for i, p := range in.Progress {
		if err := r.Progress(ctx, p); err != nil {
			return nil, fmt.Errorf("echo: posting progress update %d: %w", i, err)
		}
		if err := pause(ctx, share(i)); err != nil {
			return nil, err
		}
	}
	for i, p := range in.Stream {
		if err := r.Stream(ctx, p); err != nil {
			return nil, fmt.Errorf("echo: streaming part %d: %w", i, err)
		}
		if err := pause(ctx, share(len(in.Progress)+i)); err != nil {
			return nil, err
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

// pause waits d, or until ctx is done (its error).
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
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
