package lbproxy

import (
	"bytes"
	"path"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// A request head the loop reads itself is scanned in place: what the loop does not carry
// exactly as net/http's server would read it is handed back to net/http unread.

// scan fills q from a request head (request line, header lines, the empty line). It returns
// false for anything the loop does not carry, including heads net/http would refuse.
func (q *request) scan(head []byte) bool {
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	method, line, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(line, []byte(" "))
	if !ok1 || !ok2 || string(proto) != "HTTP/1.1" || !isToken(method) || len(target) <= len(Prefix) ||
		string(target[:len(Prefix)]) != Prefix || !cleanTarget(string(target)) {
		return false
	}
	q.method, q.target = string(method), string(target)
	q.id, q.rest = splitTarget(q.target)
	q.host, q.authz, q.length, q.close = "", "", 0, false
	q.fields, q.xff = q.fields[:0], q.xff[:0]
	hosts, lengths := 0, 0
	var conn []byte // the names the Connection header lists (see appendNames)
	for {
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !isToken(name) || !validValue(value) {
			return false // obs-fold, a bad name or value: net/http's to refuse
		}
		value = bytes.Trim(value, " \t")
		switch {
		case fold(name, "Host"):
			hosts++
			q.host = string(value)
			if !httpguts.ValidHostHeader(q.host) {
				return false
			}
		case fold(name, "Authorization"):
			q.authz = string(value)
		case fold(name, "Content-Length"):
			lengths++
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 || n > fastBodyMax || value[0] == '+' {
				return false
			}
			q.length = n
		case fold(name, "Connection"):
			conn = appendNames(conn, value)
		case fold(name, "Transfer-Encoding"), fold(name, "Upgrade"), fold(name, "Expect"):
			return false
		case fold(name, "X-Forwarded-For"):
			q.xff = appendList(q.xff, value)
		case inList(name, hopByHop), inList(name, notForwarded):
		default:
			q.fields = append(append(append(append(q.fields, name...), ": "...), value...), "\r\n"...)
		}
	}
	q.close = hasName(conn, "close")
	q.fields = dropNamed(q.fields, conn)
	return hosts == 1 && lengths <= 1
}

// splitTarget splits /lb/{id}/rest?q into the id and what the worker gets (/rest?q).
func splitTarget(target string) (id, rest string) {
	s := target[len(Prefix):]
	i := 0
	for i < len(s) && s[i] != '/' && s[i] != '?' {
		i++
	}
	id, rest = s[:i], s[i:]
	if rest == "" || rest[0] == '?' {
		rest = "/" + rest
	}
	return id, rest
}

// cleanTarget says whether a request-target's path is one net/http's ServeMux serves as is:
// no escapes (their decoding is net/http's business) and nothing path.Clean would change.
func cleanTarget(target string) bool {
	p := targetPath(target)
	for i := 0; i < len(target); i++ {
		if b := target[i]; b == '%' || b <= ' ' || b == 0x7f || b == '#' {
			return false
		}
	}
	c := path.Clean(p)
	return c == p || c+"/" == p
}

func targetPath(target string) string {
	if i := strings.IndexByte(target, '?'); i >= 0 {
		return target[:i]
	}
	return target
}

func appendList[T ~string | ~[]byte](dst []byte, v T) []byte {
	return append(append(dst, v...), ", "...)
}

// appendNames appends the names a Connection header value lists to dst, each followed by ','.
func appendNames[T ~string | ~[]byte](dst []byte, value T) []byte {
	for f := range bytes.SplitSeq([]byte(value), []byte(",")) {
		if f = bytes.TrimSpace(f); len(f) > 0 {
			dst = append(append(dst, f...), ',')
		}
	}
	return dst
}

// hasName says whether names (from appendNames) holds name, ignoring ASCII case.
func hasName[T ~string | ~[]byte](names []byte, name T) bool {
	for n := range bytes.SplitSeq(names, []byte(",")) {
		if len(n) > 0 && fold(n, name) {
			return true
		}
	}
	return false
}

// fold says whether a and b are equal, ignoring ASCII case.
func fold[A, B ~string | ~[]byte](a A, b B) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lowerASCII(a[i]) != lowerASCII(b[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// isToken says whether b is a non-empty RFC 9110 token (a method or a field name).
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tokenByte[c] {
			return false
		}
	}
	return true
}

var tokenByte = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-32] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// validValue says whether a field value has no control characters but tab.
func validValue(v []byte) bool {
	for _, c := range v {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// hopByHop are the hop-by-hop headers (RFC 9110 7.6.1) a proxy does not forward.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// notForwarded are the other headers of a caller's request the worker does not get: the
// caller's key (Gantry's business, not the worker's), the framing and forwarding headers
// the proxy writes itself, and the mark of a request another replica forwarded.
var notForwarded = []string{"Authorization", "Host", "Content-Length", "Forwarded",
	"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", ForwardedHeader}

// inList says whether name is one of names, ignoring ASCII case.
func inList[T ~string | ~[]byte](name T, names []string) bool {
	for _, n := range names {
		if fold(name, n) {
			return true
		}
	}
	return false
}
