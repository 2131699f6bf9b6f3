package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// StreamChunk is one chunk of a job's stream (spec 2.9): the handler-defined output and, when
// the worker sent them, metrics (an object of numbers, such as a text model's token counts).
type StreamChunk struct {
	Output  json.RawMessage
	Metrics json.RawMessage // nil = none
	// Seq orders a job's chunks: it grows with each chunk appended (not always by one). The
	// store sets it; PeekStream's readers pass the last one they saw to read on from it.
	Seq int64
}

// MaxStreamKept and MaxStreamKeptParts bound a job's delivered stream chunks that stay
// readable to PeekStream (the console's read that takes nothing): the newest ones, within both
// bounds, at least the last. They stay until the job is queued again or removed at its
// expiry; unread chunks count against MaxStreamBacklog instead.
const (
	MaxStreamKept      = 1 << 20 // bytes
	MaxStreamKeptParts = 1000    // chunks (a token stream's are small and many)
)

// StreamPart records one part a worker streamed, split into chunks of at most MaxStreamChunk;
// metrics (nil = none) go with the last of them.
func (js *Jobs) StreamPart(ctx context.Context, endpoint, worker, id string, part, metrics json.RawMessage) error {
	// A part the worker posted is stored even if its request is cut meanwhile: the worker
	// does not post it again, and a reader would miss it. (WithoutCancel allocates a small
	// struct per part; the store write costs far more.)
	ctx = context.WithoutCancel(ctx)
	split := SplitChunk(part, MaxStreamChunk)
	chunks := make([]StreamChunk, len(split))
	for i, c := range split {
		chunks[i].Output = c
	}
	if len(metrics) > 0 {
		chunks[len(chunks)-1].Metrics = metrics
	}
	ref := JobRef{Endpoint: endpoint, ID: id}
	unread, err := js.store.AppendChunks(ctx, id, worker, chunks)
	if err != nil {
		return js.notHeld(ctx, ref, worker, err)
	}
	if unread <= MaxStreamBacklog {
		return nil
	}
	j, err := js.post(ctx, endpoint, worker, id, !isSync(id), func(j *Job, now time.Time) {
		j.Error = fmt.Sprintf("the job streamed more than %d MB that no one read; read /stream while it runs", MaxStreamBacklog>>20)
		js.ending(j, Failed, now)
	})
	if err == nil {
		js.ended(ctx, &j, InProgress, EvFail)
	}
	return nil // the part was taken; the job failed for the backlog, or ended meanwhile
}

// ReadStream hands out the chunks not yet read, waiting up to wait for one to arrive while the
// job runs. Each chunk is handed out once.
func (js *Jobs) ReadStream(ctx context.Context, ref JobRef, wait time.Duration) (Job, []StreamChunk, error) {
	if _, err := js.read(ctx, ref); err != nil { // the caller may see the job
		return Job{}, nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, wait) // for the wait only: the reads run under ctx
	defer cancel()
	for {
		chunks, err := js.store.DrainChunks(ctx, ref.ID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return Job{}, nil, Internal("reading the job's stream", err)
		}
		j, err := js.read(ctx, ref)
		if err != nil || len(chunks) > 0 || j.Status.Terminal() {
			return js.view(ctx, j), chunks, err
		}
		if js.store.WaitChunks(wctx, ref.ID) != nil { // the wait passed, or the caller left
			snap, err := js.Get(ctx, ref, 0)
			return snap, nil, err
		}
	}
}

// PeekStream returns the job's stream chunks after the one numbered after (0 = from the
// first kept), delivered or not, and hands none out: a /stream reader still gets every chunk.
// Delivered chunks stay readable within MaxStreamKept. The console reads streams this way.
func (js *Jobs) PeekStream(ctx context.Context, ref JobRef, after int64) (Job, []StreamChunk, error) {
	if _, err := js.read(ctx, ref); err != nil { // the caller may see the job
		return Job{}, nil, err
	}
	chunks, err := js.store.PeekChunks(ctx, ref.ID, after)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Job{}, nil, Internal("reading the job's stream", err)
	}
	j, err := js.Get(ctx, ref, 0)
	return j, chunks, err
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
