package api

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strconv"

	"github.com/go-faster/jx"
	"github.com/ogen-go/ogen/ogenerrors"

	"github.com/gantryhq/gantry/core"
)

// A run or runsync body is mostly its input, which the generated server would copy three
// times over (it reads the body again, keeps it raw, and copies input out of it). So the
// input is lifted out of the body before the generated server sees it: it decodes and checks
// the same body with input's value replaced by {}, and the handler takes the input itself, a
// slice of the one buffer readBody read.

// liftedInput is a run or runsync body's input, taken out of the body the generated server
// decodes; the handler takes it (takeInput).
type liftedInput struct {
	raw  []byte // input's value as sent, a slice of the body buffer; nil once taken
	cuts []cut  // where the small body lost bytes, for error offsets (origOffset)
}

// cut is one input value replaced by {} in the small body: from at (an offset of the small
// body, just past the {}) on, the original body is removed bytes further on.
type cut struct{ at, removed int }

type liftedInputKey struct{}

// liftInput returns the body the generated server is to decode for operation op, and ctx
// carrying the input lifted out of it. Only a run or runsync body that is a JSON object whose
// (last, as the generated decoder keeps the last) input member is an object is changed;
// anything else goes on whole, so the generated server refuses it as it always has.
func liftInput(ctx context.Context, op string, body []byte) ([]byte, context.Context) {
	if op != "runJob" && op != "runSyncJob" {
		return body, ctx
	}
	var spans [][2]int // input values' [start, end) in body
	d := jx.DecodeBytes(body)
	if d.Next() != jx.Object {
		return body, ctx
	}
	err := d.ObjBytes(func(d *jx.Decoder, k []byte) error {
		if string(k) != "input" {
			return d.Skip()
		}
		raw, err := d.Raw() // a slice of body: cap tells where it starts
		if err != nil {
			return err
		}
		start := cap(body) - cap(raw)
		spans = append(spans, [2]int{start, start + len(raw)})
		return nil
	})
	if err != nil || len(spans) == 0 {
		return body, ctx
	}
	last := spans[len(spans)-1]
	raw := body[last[0]:last[1]:last[1]]
	if in := bytes.TrimSpace(raw); len(in) == 0 || in[0] != '{' {
		return body, ctx
	}
	if cap(body)-len(body) > len(body)/4 {
		// A chunked body's buffer grew by doubling: the job keeps its input, so keep an
		// exact copy rather than most of a buffer up to twice the body.
		raw = bytes.Clone(raw)
	}
	size := len(body)
	for _, s := range spans {
		size -= s[1] - s[0] - 2
	}
	small := make([]byte, 0, size)
	lifted := &liftedInput{raw: raw}
	prev, removed := 0, 0
	for _, s := range spans {
		small = append(append(small, body[prev:s[0]]...), "{}"...)
		removed += s[1] - s[0] - 2
		lifted.cuts = append(lifted.cuts, cut{at: len(small), removed: removed})
		prev = s[1]
	}
	small = append(small, body[prev:]...)
	return small, context.WithValue(ctx, liftedInputKey{}, lifted)
}

// takeInput returns the input liftInput took out of the request's body, or nil when it took
// none; the context lets go of it, so a runsync that waits holds only what its job keeps.
func takeInput(ctx context.Context) []byte {
	l, ok := ctx.Value(liftedInputKey{}).(*liftedInput)
	if !ok {
		return nil
	}
	raw := l.raw
	l.raw = nil
	return raw
}

// origOffset maps an offset of the small body to the same byte of the body as sent.
func (l *liftedInput) origOffset(off int) int {
	shift := 0
	for _, c := range l.cuts {
		if off >= c.at {
			shift = c.removed
		}
	}
	return off + shift
}

var byteOffsetRE = regexp.MustCompile(` at (\d+)\)`)

// bodyOffsets rewrites the byte offsets in the field messages of e, the answer to the
// generated server's err, when err is its refusal of a body whose input liftInput took out:
// the generated decoder counts them in the small body, the caller in the body it sent.
func bodyOffsets(ctx context.Context, err error, e *core.Error) *core.Error {
	l, ok := ctx.Value(liftedInputKey{}).(*liftedInput)
	var dre *ogenerrors.DecodeRequestError
	if !ok || e.Kind != core.KindInvalid || len(e.Fields) == 0 || !errors.As(err, &dre) {
		return e
	}
	fields := make([]core.FieldError, len(e.Fields))
	for i, f := range e.Fields {
		f.Message = byteOffsetRE.ReplaceAllStringFunc(f.Message, func(m string) string {
			n, err := strconv.Atoi(m[len(" at ") : len(m)-1])
			if err != nil {
				return m
			}
			return " at " + strconv.Itoa(l.origOffset(n)) + ")"
		})
		fields[i] = f
	}
	return core.Invalid(fields...)
}
