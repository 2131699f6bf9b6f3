package lbproxy_test

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/gantryhq/gantry/lbproxy"
)

// FuzzLoadBalancerHead checks the proxy's connection loop against net/http on any request
// head: a head the loop carries is one net/http's server also accepts (no request reaches a
// worker that Go's server would have refused), read the same way (method, target, Host,
// Content-Length, Connection: close), and the worker gets exactly the caller's header fields
// less the hop-by-hop ones, those Connection names, the key and the forwarding headers.
func FuzzHead(f *testing.F) {
	for _, s := range []string{
		"GET /lb/ep/x HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer k\r\n\r\n",
		"POST /lb/ep/v1/chat?stream=1 HTTP/1.1\r\nHost: h:80\r\nContent-Length: 3\r\nConnection: close, X-A\r\nX-A: 1\r\nX-B: 2\r\nx-b:  3 \r\n\r\n",
		"GET /lb/ep HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET /lb/ep/../x HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"GET /lb/ep/%2e HTTP/1.1\r\nHost: a b\r\nX-Forwarded-For: 1.2.3.4\r\nKeep-Alive: 5\r\n\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, head string) {
		if !strings.HasSuffix(head, "\r\n\r\n") || strings.Index(head, "\r\n\r\n") != len(head)-4 {
			return // the loop hands the scanner exactly one head
		}
		ok, method, target, host, length, closing, fields := lbproxy.ScanHead([]byte(head))
		if !ok {
			return
		}
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head)))
		if err != nil {
			t.Fatalf("the loop carries a head net/http refuses (%v): %q", err, head)
		}
		hosts := r.Header.Values("Host") // ReadRequest moves one Host into r.Host (an empty one is valid)
		if len(hosts) > 0 || !httpguts.ValidHostHeader(r.Host) {
			t.Fatalf("the loop carries a head whose Host net/http's server refuses: %q", head)
		}
		for k, vv := range r.Header {
			for _, v := range vv {
				if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
					t.Fatalf("the loop carries a field net/http's server refuses (%q: %q): %q", k, v, head)
				}
			}
		}
		if r.ProtoMajor != 1 || r.ProtoMinor != 1 || len(r.TransferEncoding) > 0 || r.Header.Get("Upgrade") != "" || r.Header.Get("Expect") != "" {
			t.Fatalf("the loop carries a request it must hand back: %q", head)
		}
		if method != r.Method || target != r.RequestURI || host != r.Host || length != r.ContentLength || closing != r.Close {
			t.Fatalf("the loop read %q %q host %q length %d close %v; net/http %q %q %q %d %v: %q",
				method, target, host, length, closing, r.Method, r.RequestURI, r.Host, r.ContentLength, r.Close, head)
		}
		got, err := textproto.NewReader(bufio.NewReader(strings.NewReader(fields + "\r\n"))).ReadMIMEHeader()
		if err != nil {
			t.Fatalf("the fields the worker gets do not parse (%v): %q", err, fields)
		}
		want := http.Header{}
		dropped := map[string]bool{}
		for _, v := range r.Header["Connection"] {
			for n := range strings.SplitSeq(v, ",") {
				dropped[textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(n))] = true
			}
		}
		for _, n := range []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
			"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Authorization", "Host", "Content-Length", "Forwarded",
			"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
			dropped[n] = true
		}
		for k, vv := range r.Header {
			if !dropped[k] {
				want[k] = vv
			}
		}
		if !reflect.DeepEqual(http.Header(got), want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("the worker gets %v; want %v: %q", got, want, head)
		}
	})
}

// FuzzLoadBalancerAnswer checks the proxy's relay of a worker's answer against net/http's
// reading of the same bytes: an answer the loop relays whole reaches the caller as an answer
// net/http reads with the same status and the same body, without hop-by-hop headers, in any
// framing the worker chose (length, chunked with trailers, until close, none).
func FuzzAnswer(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\nConnection: X-A\r\nX-A: 1\r\n\r\n3;ext=1\r\nabc\r\n0\r\nX-Sum: 9\r\n\r\n",
		"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\nKeep-Alive: timeout=5\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\nETag: \"v\"\r\n\r\n",
		"HTTP/1.1 200\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
	} {
		f.Add(s, false)
	}
	f.Add("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true)
	f.Fuzz(func(t *testing.T, raw string, head bool) {
		out, err := lbproxy.RelayAnswer([]byte(raw), head)
		if err != nil {
			return // a 502, or an answer cut short: nothing to compare
		}
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		br := bufio.NewReader(strings.NewReader(raw))
		var want *http.Response
		for {
			if want, err = http.ReadResponse(br, &http.Request{Method: method}); err != nil {
				t.Fatalf("the loop relays an answer net/http cannot read (%v): %q", err, raw)
			}
			if want.StatusCode >= 200 {
				break
			}
		}
		wantBody, err := io.ReadAll(want.Body)
		if err != nil {
			t.Fatalf("the loop relays an answer whose body net/http cannot read (%v): %q", err, raw)
		}
		got, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), &http.Request{Method: method})
		if err != nil {
			t.Fatalf("the caller cannot read the relayed answer (%v): %q from %q", err, out, raw)
		}
		gotBody, err := io.ReadAll(got.Body)
		if err != nil || got.StatusCode != want.StatusCode || !bytes.Equal(gotBody, wantBody) {
			t.Fatalf("relayed %d %q (%v); net/http read %d %q: %q from %q", got.StatusCode, gotBody, err, want.StatusCode, wantBody, out, raw)
		}
		for _, h := range []string{"Keep-Alive", "Proxy-Connection", "Upgrade", "Te"} {
			if got.Header.Get(h) != "" {
				t.Fatalf("the relayed answer carries %s: %q from %q", h, out, raw)
			}
		}
		for k, vv := range got.Trailer {
			if !reflect.DeepEqual(vv, want.Trailer[k]) && want.Trailer[k] != nil {
				t.Fatalf("trailer %s = %q; net/http read %q: %q from %q", k, vv, want.Trailer[k], out, raw)
			}
		}
	})
}
