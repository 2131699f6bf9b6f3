package core

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// StreamChunk is one chunk of a job's stream (spec 2.9): the handler-defined output and, when
// the worker sent them, metrics (an object of numbers, such as a text model's token counts).
type StreamChunk struct {
	Output  json.RawMessage
	Metrics json.RawMessage // nil = none
}

// streamState holds a running job's stream chunks not read yet.
type streamState struct {
	chunks []StreamChunk
	bytes  int
	sig    chan struct{} // signalled when a chunk arrives or the job ends
}

func (e *entry) streamOf() *streamState {
	x := e.extra()
	if x.stream == nil {
		x.stream = &streamState{sig: make(chan struct{}, 1)}
	}
	return x.stream
}

// StreamPart records one part a worker streamed, split into chunks of at most MaxStreamChunk;
// metrics (nil = none) go with the last of them.
func (js *Jobs) StreamPart(endpoint, worker, id string, part, metrics json.RawMessage) error {
	e, rec, err := js.held(endpoint, worker, id)
	if err != nil {
		return err
	}
	needSync := false
	defer func() { e.unlock(); _ = js.sync(needSync) }()
	rec.Streamed = true
	st := e.streamOf()
	for _, c := range SplitChunk(part, MaxStreamChunk) {
		st.chunks = append(st.chunks, StreamChunk{Output: c})
		st.bytes += len(c)
	}
	if len(metrics) > 0 {
		st.chunks[len(st.chunks)-1].Metrics = metrics
		st.bytes += len(metrics)
	}
	if st.bytes > MaxStreamBacklog {
		rec.Error = fmt.Sprintf("the job streamed more than %d MB that no one read; read /stream while it runs", MaxStreamBacklog>>20)
		needSync = js.end(e, rec, EvFail, Failed)
		return nil
	}
	signal(st.sig)
	return nil
}

// ReadStream hands out the chunks not yet read, waiting up to wait for one to arrive while the
// job runs. Each chunk is handed out once.
func (js *Jobs) ReadStream(ctx context.Context, ref JobRef, wait time.Duration) (Job, []StreamChunk, error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	if ref.Owner != "" { // checked once: a job's owner never changes
		e, err := js.lookupRef(ref)
		if err != nil {
			return Job{}, nil, err
		}
		e.unlock()
	}
	for {
		e, err := js.lookup(ref.Endpoint, ref.ID)
		if err != nil {
			return Job{}, nil, err
		}
		st := e.streamOf()
		if len(st.chunks) > 0 || e.status().Terminal() {
			chunks := st.chunks
			st.chunks, st.bytes = nil, 0
			rec, err := js.record(e)
			var snap Job
			if err == nil {
				snap = *rec // copied under the lock: an attached record is still changing
			}
			e.unlock()
			return snap, chunks, err
		}
		sig := st.sig
		e.unlock()
		select {
		case <-sig:
		case <-deadline.C:
			snap, err := js.Get(ref, 0)
			return snap, nil, err
		case <-ctx.Done():
			snap, err := js.Get(ref, 0)
			return snap, nil, err
		}
	}
}

// SplitChunk splits a streamed part over several chunks when it is larger than limit: a
// string into shorter strings (on character boundaries), an array into shorter arrays, any
// other value into string pieces of its JSON text.
func SplitChunk(part json.RawMessage, limit int) []json.RawMessage {
	if len(part) <= limit {
		return []json.RawMessage{part}
	}
	var s string
	if err := json.Unmarshal(part, &s); err != nil {
		var arr []json.RawMessage
		if json.Unmarshal(part, &arr) == nil && len(arr) > 1 {
			var out []json.RawMessage
			cur, size := []json.RawMessage{}, 2
			for _, el := range arr {
				if size+len(el)+1 > limit && len(cur) > 0 {
					b, _ := json.Marshal(cur)
					out = append(out, b)
					cur, size = nil, 2
				}
				cur, size = append(cur, el), size+len(el)+1
			}
			b, _ := json.Marshal(cur)
			return append(out, b)
		}
		s = string(part)
	}
	var out []json.RawMessage
	step := max(limit/2-16, 1) // JSON escaping can double a string's size
	for len(s) > 0 {
		n := min(step, len(s))
		for n < len(s) && n > 0 && !utf8Start(s[n]) {
			n--
		}
		b, _ := json.Marshal(s[:n])
		out = append(out, b)
		s = s[n:]
	}
	return out
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
