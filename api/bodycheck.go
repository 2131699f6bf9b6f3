package api

import (
	"bytes"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ogen-go/ogen/ogenerrors"

	"github.com/gantryhq/gantry/core"
)

// contentTypeError refuses (415) a Content-Type header that is missing or not a media type at
// all; nil for a media type (the generated server checks that it is application/json). ogen
// reports both as a 422 naming "$" with mime's words, which says nothing useful.
func contentTypeError(ct string) *core.Error {
	if ct == "" {
		return &core.Error{Kind: kindUnsupportedMediaType, Detail: "the Content-Type header is missing; the body must be application/json"}
	}
	if _, _, err := mime.ParseMediaType(ct); err != nil {
		return &core.Error{Kind: kindUnsupportedMediaType,
			Detail: "the Content-Type header " + strconv.Quote(ct) + " is not a valid media type; the body must be application/json"}
	}
	return nil
}

// textError refuses (400) a JSON body whose text is not Unicode: invalid UTF-8, or a \u escape
// of a surrogate that is not half of a pair. Such text would be stored and echoed raw, so every
// answer carrying it would not be JSON. body must be syntactically valid JSON. The common case
// costs one pass of utf8.Valid and one bytes.Index scan for `\u` escapes of surrogates; only a
// refused body is walked again, to name the path of the bad string.
func textError(body []byte) *core.Error {
	if utf8.Valid(body) && !hasLoneSurrogate(body) {
		return nil
	}
	path, msg := findBadText(body)
	if path == "" {
		return nil // a false alarm: the escape was inside an escaped backslash (`\\ud800`)
	}
	f := core.FieldError{Path: path, Message: msg}
	return &core.Error{Kind: core.KindMalformed, Detail: f.String(), Fields: []core.FieldError{f}}
}

// hasLoneSurrogate reports whether body may hold a \u escape of a surrogate outside a
// high-low pair. It may report one inside an escaped backslash; findBadText settles that.
func hasLoneSurrogate(body []byte) bool {
	for i := 0; ; {
		j := bytes.Index(body[i:], []byte(`\u`))
		if j < 0 {
			return false
		}
		p := i + j
		switch surrogateAt(body, p) {
		case highSurrogate:
			if surrogateAt(body, p+6) != lowSurrogate {
				return true
			}
			i = p + 12
			continue
		case lowSurrogate:
			return true // a low half not right after a high one (pairs are skipped whole above)
		}
		i = p + 2
	}
}

const (
	noSurrogate = iota
	highSurrogate
	lowSurrogate
)

// surrogateAt classifies the \uXXXX escape at body[p:], if there is one.
func surrogateAt(body []byte, p int) int {
	if p+6 > len(body) || body[p] != '\\' || body[p+1] != 'u' || (body[p+2] != 'd' && body[p+2] != 'D') {
		return noSurrogate
	}
	if !isHex(body[p+4]) || !isHex(body[p+5]) {
		return noSurrogate
	}
	switch body[p+3] {
	case '8', '9', 'a', 'b', 'A', 'B':
		return highSurrogate
	case 'c', 'd', 'e', 'f', 'C', 'D', 'E', 'F':
		return lowSurrogate
	}
	return noSurrogate
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// findBadText walks valid JSON and returns the path of the first string (a value, or a
// property name) that is not Unicode, and what is wrong with it; "" when there is none.
func findBadText(body []byte) (path, msg string) {
	type frame struct {
		array  bool
		index  int
		key    string
		keyNow bool // an object expecting a property name
	}
	stack := []frame{{}} // the root: a value at "$"
	pathOf := func() string {
		var b []byte
		b = append(b, '$')
		for _, f := range stack[1:] {
			if f.array {
				b = append(b, '[')
				b = strconv.AppendInt(b, int64(f.index), 10)
				b = append(b, ']')
			} else {
				b = append(b, '.')
				b = append(b, f.key...)
			}
		}
		return string(b)
	}
	for i := 0; i < len(body); i++ {
		top := &stack[len(stack)-1]
		switch body[i] {
		case '{':
			stack = append(stack, frame{keyNow: true})
		case '[':
			stack = append(stack, frame{array: true})
		case '}', ']':
			stack = stack[:len(stack)-1]
		case ',':
			if top.array {
				top.index++
			} else {
				top.keyNow = true
			}
		case '"':
			end, bad := scanString(body, i+1)
			s := body[i+1 : end]
			if !top.array && top.keyNow && len(stack) > 1 {
				top.keyNow = false
				top.key = string(s)
				if bad != "" {
					top.key = strconv.QuoteToASCII(string(s))
					return pathOf(), "the property name " + bad
				}
			} else if bad != "" {
				return pathOf(), bad
			}
			i = end
		}
	}
	return "", ""
}

// scanString reads a JSON string's content from body[start:] up to its closing quote: the
// quote's index, and what is wrong with the text ("" when nothing).
func scanString(body []byte, start int) (end int, bad string) {
	for i := start; i < len(body); {
		c := body[i]
		switch {
		case c == '"':
			return i, bad
		case c == '\\':
			if bad == "" {
				switch surrogateAt(body, i) {
				case highSurrogate:
					if surrogateAt(body, i+6) == lowSurrogate {
						i += 12
						continue
					}
					bad = "holds a lone surrogate escape (" + string(body[i:i+6]) + "): it is not Unicode text"
				case lowSurrogate:
					bad = "holds a lone surrogate escape (" + string(body[i:i+6]) + "): it is not Unicode text"
				}
			}
			i += 2
		case c < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && n == 1 && bad == "" {
				bad = "is not valid UTF-8 (at byte offset " + strconv.Itoa(i) + " of the body)"
			}
			i += n
		}
	}
	return len(body), bad
}

// checkBodyText checks the text of a JSON body a caller sends (not a worker): 400 when it is not
// Unicode. body is syntactically valid JSON when ct is JSON.
func checkBodyText(op, ct string, body []byte) *core.Error {
	if isWorkerOp(op) || !strings.HasPrefix(ct, "application/json") {
		return nil
	}
	return textError(body)
}

// typeError words the generated server's refusal of a body by its Content-Type, which only
// operations that take a body make: a missing type on a request without a body is 400 (a JSON
// body is required), a missing type or one that is not a media type is 415.
func typeError(r *http.Request, err error) *core.Error {
	var body *ogenerrors.DecodeRequestError
	if !errors.As(err, &body) {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" && r.ContentLength == 0 {
		return core.Errorf(core.KindMalformed, "a JSON body is required")
	}
	return contentTypeError(ct)
}

// MaxJSONDepth is how deeply a JSON body may nest arrays and objects: the limit of the decoder
// (go-faster/jx) that every operation's body goes through.
const MaxJSONDepth = 10000

// jsonError is the problem of a JSON body that is not valid: too deep, naming the limit and
// where it was passed, or otherwise not JSON.
func jsonError(body []byte) *core.Error {
	if at := tooDeepAt(body, MaxJSONDepth); at >= 0 {
		return core.Errorf(core.KindMalformed, "the body's JSON is nested too deep: arrays and objects may nest %d deep, and byte %d opens level %d",
			MaxJSONDepth, at, MaxJSONDepth+1)
	}
	return core.Errorf(core.KindMalformed, "the body is not valid JSON")
}

// tooDeepAt returns the offset of the first '[' or '{' outside strings that opens more than
// limit levels of nesting in body, or -1 when none does. It does not check the rest of the
// syntax.
func tooDeepAt(body []byte, limit int) int {
	depth, inString := 0, false
	for i := 0; i < len(body); i++ {
		c := body[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			if depth++; depth > limit {
				return i
			}
		case ']', '}':
			depth--
		}
	}
	return -1
}
