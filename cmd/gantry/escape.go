package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable returns text from the server (names, reasons, errors, worker log lines) ready to
// print on a terminal: every control character (C0 but tab, DEL, C1) and every byte that is
// not UTF-8 shown escaped (ESC as \x1b, U+009B as \u009b), so that what a tenant or a
// worker wrote cannot move the cursor, clear the screen or retitle the window. Tabs stay.
func printable(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteByte('\t')
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// needsEscape reports whether printable would change s.
func needsEscape(s string) bool {
	for i, r := range s {
		if (r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD")) || (r != '\t' && unicode.IsControl(r)) {
			return true
		}
	}
	return false
}

// jsonControls rewrites the control characters that JSON lets a string hold raw (DEL and the
// C1 range) as \u escapes, and invalid UTF-8 as \ufffd: the same JSON value, safe to print. In
// valid JSON the other control characters are already escaped (or whitespace between tokens).
func jsonControls(b []byte) []byte {
	clean := true
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if (r == utf8.RuneError && size == 1) || (r >= 0x7f && r <= 0x9f) {
			clean = false
			break
		}
		i += size
	}
	if clean {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			out = append(out, `\ufffd`...)
		case r >= 0x7f && r <= 0x9f:
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	return out
}
