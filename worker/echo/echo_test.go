package echo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/worker"
)

// recorder is a worker.Responder that records what the handler posts.
type recorder struct {
	calls []string // "progress <json>" or "stream <json>", in order
	fail  error    // returned by every call when set
}

func (r *recorder) Progress(_ context.Context, v any) error {
	return r.record("progress", v)
}

func (r *recorder) Stream(_ context.Context, part any) error {
	return r.record("stream", part)
}

func (r *recorder) PutFile(_ context.Context, ext string, data []byte) (worker.File, error) {
	return worker.File{}, errors.New("recorder: no files")
}

func (r *recorder) record(kind string, v any) error {
	if r.fail != nil {
		return r.fail
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	r.calls = append(r.calls, kind+" "+string(b))
	return nil
}

var _ worker.Responder = (*recorder)(nil)

// run calls Handler on input and returns the output as JSON, the error text and the calls.
func run(t *testing.T, ctx context.Context, input string) (out string, errText string, calls []string) {
	t.Helper()
	r := &recorder{}
	v, err := Handler(ctx, &worker.Job{ID: "j", Input: json.RawMessage(input)}, r)
	if err != nil {
		return "", err.Error(), r.calls
	}
	b, merr := json.Marshal(v)
	if merr != nil {
		t.Fatalf("Handler(%s) output %v does not encode: %v", input, v, merr)
	}
	return string(b), "", r.calls
}

func TestHandler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		input string
		out   string // compact JSON; "" when the job fails
		err   string
		calls []string
	}{
		{`{"echo": "hi"}`, `"hi"`, "", nil},
		{`{"echo": null}`, `null`, "", nil},
		{`{"echo": {"a": [1, 2]}, "other": 1}`, `{"a":[1,2]}`, "", nil},
		{`{"prompt": "x", "n": 2}`, `{"prompt":"x","n":2}`, "", nil},
		{`{}`, `{}`, "", nil},
		{`null`, `{}`, "", nil},
		{``, `{}`, "", nil},
		{`{"sleep_ms": 1}`, `{"sleep_ms":1}`, "", nil},
		{`{"progress": [10, {"pct": 50}, "s"], "echo": 1}`, `1`, "", []string{`progress 10`, `progress {"pct":50}`, `progress "s"`}},
		{`{"stream": ["a", {"b": 1}]}`, `["a",{"b":1}]`, "", []string{`stream "a"`, `stream {"b":1}`}},
		{`{"stream": ["a"], "echo": "ignored"}`, `["a"]`, "", []string{`stream "a"`}},
		{`{"stream": []}`, `[]`, "", nil},
		{`{"progress": [1], "stream": [2], "error": "boom"}`, "", "boom", []string{`progress 1`, `stream 2`}},
		{`{"error": "boom", "echo": 1}`, "", "boom", nil},
		{`[1]`, "", "echo: the input must be a JSON object", nil},
		{`"x"`, "", "echo: the input must be a JSON object", nil},
		{`{"sleep_ms": "1"}`, "", "echo: sleep_ms: want an integer, got JSON string", nil},
		{`{"sleep_ms": 1.5}`, "", "echo: sleep_ms: want an integer, got JSON number 1.5", nil},
		{`{"sleep_ms": -1}`, "", "echo: sleep_ms -1 is out of range (0..86400000)", nil},
		{`{"sleep_ms": 86400001}`, "", "echo: sleep_ms 86400001 is out of range (0..86400000)", nil},
		{`{"progress": 1}`, "", "echo: progress: want an array, got JSON number", nil},
		{`{"error": 1}`, "", "echo: error: want a string, got JSON number", nil},
	}
	for _, tt := range tests {
		out, errText, calls := run(t, t.Context(), tt.input)
		if out != tt.out || errText != tt.err || !slices.Equal(calls, tt.calls) {
			t.Errorf("Handler(%s) = %s, %q, calls %q; want %s, %q, calls %q", tt.input, out, errText, calls, tt.out, tt.err, tt.calls)
		}
	}
}

func TestSleep(t *testing.T) {
	t.Parallel()
	began := time.Now()
	if _, errText, _ := run(t, t.Context(), `{"sleep_ms": 50, "echo": 1}`); errText != "" {
		t.Fatalf("Handler = %s; want success", errText)
	}
	if d := time.Since(began); d < 50*time.Millisecond {
		t.Errorf("Handler with sleep_ms 50 returned after %v; want at least 50ms", d)
	}
}

func TestSleepCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	r := &recorder{}
	go func() {
		_, err := Handler(ctx, &worker.Job{ID: "j", Input: json.RawMessage(`{"sleep_ms": 3600000, "progress": [1, 2]}`)}, r)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Handler after cancel = %v; want context.Canceled", err)
		}
		if want := []string{"progress 1"}; !slices.Equal(r.calls, want) {
			t.Errorf("calls after cancel = %q; want %q (the first update, then the cancelled sleep)", r.calls, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Handler did not return within 5s of its context's cancel")
	}
}

// posted is a worker.Responder that hands each call to a channel, as it happens.
type posted chan string

func (p posted) Progress(_ context.Context, v any) error {
	p <- fmt.Sprintf("progress %s", v)
	return nil
}
func (p posted) Stream(_ context.Context, v any) error { p <- fmt.Sprintf("stream %s", v); return nil }
func (p posted) PutFile(context.Context, string, []byte) (worker.File, error) {
	return worker.File{}, errors.New("posted: no files")
}

// TestStepsBeforeSleep checks that each progress update and stream part is posted before its
// share of sleep_ms, so that a status or stream call during the sleep sees it.
func TestStepsBeforeSleep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		input string
		want  []string // posted, in order, each before its share of the hour-long sleep ends
	}{
		{`{"sleep_ms": 3600000, "progress": [50]}`, []string{"progress 50"}},
		{`{"sleep_ms": 3600000, "stream": ["a", "b"]}`, []string{`stream "a"`}},
		{`{"sleep_ms": 3600000, "progress": [1], "stream": ["a"]}`, []string{"progress 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.input, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			p := make(posted, 10)
			done := make(chan error, 1)
			go func() {
				_, err := Handler(ctx, &worker.Job{ID: "j", Input: json.RawMessage(tt.input)}, p)
				done <- err
			}()
			deadline := time.After(5 * time.Second)
			for _, want := range tt.want {
				select {
				case got := <-p:
					if got != want {
						t.Fatalf("posted %q; want %q", got, want)
					}
				case err := <-done:
					t.Fatalf("Handler returned %v before posting %q", err, want)
				case <-deadline:
					t.Fatalf("%q was not posted within 5s: it waits for the sleep", want)
				}
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Handler after cancel = %v; want context.Canceled", err)
			}
			if len(p) != 0 {
				t.Errorf("%d more calls posted during the first share of the sleep; want none", len(p))
			}
		})
	}
}

func TestSleepShares(t *testing.T) {
	t.Parallel()
	began := time.Now()
	if _, errText, calls := run(t, t.Context(), `{"sleep_ms": 60, "progress": [1, 2], "stream": [3]}`); errText != "" || len(calls) != 3 {
		t.Fatalf("Handler = %s, calls %q; want success, 3 calls", errText, calls)
	}
	if d := time.Since(began); d < 60*time.Millisecond {
		t.Errorf("Handler with sleep_ms 60 over 3 steps returned after %v; want at least 60ms in all", d)
	}
}

func TestResponderError(t *testing.T) {
	t.Parallel()
	for _, input := range []string{`{"progress": [1]}`, `{"stream": [1]}`} {
		r := &recorder{fail: worker.ErrStopped}
		_, err := Handler(t.Context(), &worker.Job{ID: "j", Input: json.RawMessage(input)}, r)
		if !errors.Is(err, worker.ErrStopped) || !strings.HasPrefix(err.Error(), "echo: ") {
			t.Errorf("Handler(%s) with a failing Responder = %v; want an echo: error wrapping it", input, err)
		}
	}
}

func FuzzHandler(f *testing.F) {
	for _, s := range []string{`{"echo":1}`, `{"stream":[1,2],"progress":[3]}`, `{"error":"x"}`, `{"sleep_ms":0}`, `[]`, `nul`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, input string) {
		var probe struct {
			SleepMS json.RawMessage `json:"sleep_ms"`
		}
		if json.Unmarshal([]byte(input), &probe) == nil && len(probe.SleepMS) > 0 && string(probe.SleepMS) != "0" {
			t.Skip("no sleeping while fuzzing")
		}
		r := &recorder{}
		out, err := Handler(t.Context(), &worker.Job{ID: "j", Input: json.RawMessage(input)}, r)
		if err == nil {
			if _, merr := json.Marshal(out); merr != nil {
				t.Errorf("Handler(%q) output does not encode: %v", input, merr)
			}
		}
	})
}
