package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/gantryhq/gantry/api"
	"github.com/gantryhq/gantry/core"
)

// fuzzRequest sends body to method path through the handler in memory and checks what any
// input must get: no panic, never a 5xx, and a well-formed problem+json body on every error.
func fuzzRequest(t *testing.T, e *env, method, path string, body []byte) {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.alice)
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	e.api.ServeHTTP(w, req)
	if w.Code >= 500 {
		t.Fatalf("%s %s %q = %d %s; want no 5xx", method, path, body, w.Code, w.Body)
	}
	if w.Code < 300 {
		return
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%q: Content-Type %q; want application/problem+json", body, ct)
	}
	var p struct {
		Title  string   `json:"title"`
		Status int      `json:"status"`
		Detail string   `json:"detail"`
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != w.Code || p.Title == "" || p.Detail == "" {
		t.Fatalf("%q: problem body %s (%v)", body, w.Body, err)
	}
	for _, e := range p.Errors {
		if !strings.HasPrefix(e, "$") || !strings.Contains(e, ": ") {
			t.Fatalf("%q: error %q is not `<json path>: <message>`", body, e)
		}
	}
}

func fuzzSeeds(f *testing.F) {
	for _, s := range []string{
		minimalQueue,
		with(`{"type":"LOAD_BALANCER","scaling":{"type":"REQUEST_COUNT","requestCount":1},"workers":{"min":0,"max":1,"idleTimeout":5}}`),
		with(`{"templateId":"tpl-pub","env":{"A":"b"},"allowedCudaVersions":["12.4"],"ports":["80/http"],"registry":null}`, "image"),
		`{"name":"","gpu":{"pools":[]},"scaling":{}}`, `[]`, `null`, `{"name":`, `{"gpu":{"count":1e999}}`,
	} {
		f.Add([]byte(s))
	}
}

// FuzzCreateEndpoint fuzzes the create body decoder and validator.
func FuzzCreateEndpoint(f *testing.F) {
	fuzzSeeds(f)
	e := setup(f, setupOpts{quota: core.Quota{}})
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzRequest(t, e, "POST", "/v2/serverless", body)
	})
}

// FuzzUpdateEndpoint fuzzes the partial-update decoder and the re-validation of the result.
func FuzzUpdateEndpoint(f *testing.F) {
	fuzzSeeds(f)
	f.Add([]byte(`{"scaling":{"type":"REQUEST_COUNT","requestCount":2},"workers":{"idleTimeout":3}}`))
	e := setup(f, setupOpts{quota: core.Quota{}})
	id := e.create(minimalQueue)
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzRequest(t, e, "PATCH", "/v2/serverless/"+id, body)
	})
}

// FuzzLoadBalancerHead checks the proxy's connection loop against net/http on any request
// head: a head the loop carries is one net/http's server also accepts (no request reaches a
// worker that Go's server would have refused), read the same way (method, target, Host,
// Content-Length, Connection: close), and the worker gets exactly the caller's header fields
// less the hop-by-hop ones, those Connection names, the key and the forwarding headers.
func FuzzLoadBalancerHead(f *testing.F) {
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
		ok, method, target, host, length, closing, fields := api.ScanLBHead([]byte(head))
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
func FuzzLoadBalancerAnswer(f *testing.F) {
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
		out, err := api.RelayLBAnswer([]byte(raw), head)
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
