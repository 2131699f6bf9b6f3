package api

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-faster/jx"
)

// FuzzBodyText checks textError on any JSON: it never panics, the fast path never lets
// through what the full walk refuses, a refusal names a JSON path, and text without escapes
// that is UTF-8 is taken.
func FuzzBodyText(f *testing.F) {
	for _, s := range []string{
		`{"input":{"prompt":"a\ud800b"}}`, `{"a":["\udc00"]}`, `"\ud83d\ude00"`, `{"a":"\\ud800"}`,
		"{\"a\":\"\xff\"}", `{"\ud800":1}`, `[1,{"b":[{"c":"\uDBFF\uDFFF\uD800"}]}]`, `{"a":"\"\\\"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !jx.Valid(body) {
			return
		}
		e := textError(body)
		if path, _ := findBadText(body); path != "" && e == nil {
			t.Fatalf("textError(%q) = nil; the walk refuses %s", body, path)
		}
		if e != nil && (len(e.Fields) != 1 || !strings.HasPrefix(e.Fields[0].Path, "$")) {
			t.Fatalf("textError(%q) = %v; want one field error with a $ path", body, e)
		}
		if e != nil && utf8.Valid(body) && !bytes.Contains(body, []byte(`\u`)) {
			t.Fatalf("textError(%q) = %v; want nil for UTF-8 without escapes", body, e)
		}
	})
}

// BenchmarkTextError measures the check every /run body pays: a 1 KB and a 1 MB input of
// text, plain and with escaped emoji.
func BenchmarkTextError(b *testing.B) {
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"1KB", []byte(`{"input":{"prompt":"` + strings.Repeat("a cat on a mat ", 64) + `"}}`)},
		{"1MB", []byte(`{"input":{"prompt":"` + strings.Repeat("a cat on a mat ", 1<<16) + `"}}`)},
		{"1MB-utf8", []byte(`{"input":{"prompt":"` + strings.Repeat("un chat é ", 1<<16) + `"}}`)},
		{"1MB-escapes", []byte(`{"input":{"prompt":"` + strings.Repeat(`cat \ud83d\ude00 `, 1<<15) + `"}}`)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				if textError(tc.body) != nil {
					b.Fatal("refused")
				}
			}
		})
	}
}

// TestTooDeepAt: the nesting scan counts brackets outside strings only, escapes included.
func TestTooDeepAt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body  string
		limit int
		want  int
	}{
		{`[[]]`, 2, -1},
		{`[[[]]]`, 2, 2},
		{`{"a":{"b":[1]}}`, 2, 10},
		{`["[[[[", "\"[[["]`, 1, -1},
		{`["\\", [[]]]`, 2, 8},
		{`[] [] []`, 1, -1},
	}
	for _, tc := range tests {
		if got := tooDeepAt([]byte(tc.body), tc.limit); got != tc.want {
			t.Errorf("tooDeepAt(%s, %d) = %d; want %d", tc.body, tc.limit, got, tc.want)
		}
	}
}

// TestMaxJSONDepthIsTheDecoders: MaxJSONDepth is the decoder's own limit, so a body refused for
// its depth is one the decoder refuses, and every body it accepts passes.
func TestMaxJSONDepthIsTheDecoders(t *testing.T) {
	t.Parallel()
	nest := func(n int) []byte { return []byte(strings.Repeat("[", n) + strings.Repeat("]", n)) }
	if !jx.Valid(nest(MaxJSONDepth)) || tooDeepAt(nest(MaxJSONDepth), MaxJSONDepth) >= 0 {
		t.Errorf("a body nested %d deep is refused", MaxJSONDepth)
	}
	if jx.Valid(nest(MaxJSONDepth+1)) || tooDeepAt(nest(MaxJSONDepth+1), MaxJSONDepth) != MaxJSONDepth {
		t.Errorf("a body nested %d deep is not refused as too deep at byte %d", MaxJSONDepth+1, MaxJSONDepth)
	}
}
