package api_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api"
	"github.com/gantryhq/gantry/core"
)

// TestReadKeyTTL: a read key gets a job's status but may not change its ttl (a short one would
// remove the job from under its owner); the job is left as it was.
func TestReadKeyTTL(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create(minimalQueue)
	job := e.do("POST", "/v2/"+id+"/run", e.alice, `{"input":{}}`).json(t)["id"].(string)
	const detail = `this key's scope \"read\" may read a job's status but not change its ttl (it needs scope all or jobs)`
	tests := []struct {
		name, method, path, key string
		status                  int
		want                    string // the body, or "" for a 200 job
	}{
		{"GET status ttl", "GET", "/v2/" + id + "/status/" + job + "?ttl=1", e.read, 403,
			`{"title":"Forbidden","status":403,"detail":"` + detail + `","error":"` + detail + `"}`},
		{"POST status ttl", "POST", "/v2/" + id + "/status/" + job + "?ttl=1", e.read, 403,
			`{"title":"Forbidden","status":403,"detail":"` + detail + `","error":"` + detail + `"}`},
		{"GET status-sync ttl", "GET", "/v2/" + id + "/status-sync/" + job + "?wait=1000&ttl=1", e.read, 403,
			`{"title":"Forbidden","status":403,"detail":"` + detail + `","error":"` + detail + `"}`},
		{"POST status-sync ttl", "POST", "/v2/" + id + "/status-sync/" + job + "?wait=1000&ttl=1", e.read, 403,
			`{"title":"Forbidden","status":403,"detail":"` + detail + `","error":"` + detail + `"}`},
		{"read key without ttl", "GET", "/v2/" + id + "/status/" + job, e.read, 200, ""},
		{"the owner still sees the job", "GET", "/v2/" + id + "/status/" + job, e.alice, 200, ""},
	}
	for _, tc := range tests {
		r := e.do(tc.method, tc.path, tc.key, "")
		if r.status != tc.status {
			t.Errorf("%s: %s %s = %d %s; want %d", tc.name, tc.method, tc.path, r.status, r.body, tc.status)
			continue
		}
		if tc.want != "" && strings.TrimSpace(r.body) != tc.want {
			t.Errorf("%s: body = %s; want %s", tc.name, r.body, tc.want)
		}
		if tc.want != "" && r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: Content-Type = %q; want application/problem+json", tc.name, r.header.Get("Content-Type"))
		}
		if tc.status == http.StatusOK && r.json(t)["status"] != "IN_QUEUE" {
			t.Errorf("%s: status = %v; want IN_QUEUE (the job untouched)", tc.name, r.json(t)["status"])
		}
	}
}

// TestBodyErrors: a missing or broken Content-Type is 415, a body without Unicode text is 400
// naming the path of the bad string, each as problem+json; good text (pairs, escaped
// backslashes) is taken.
func TestBodyErrors(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create(minimalQueue)
	run := "/v2/" + id + "/run"
	const missing = `the Content-Type header is missing; the body must be application/json`
	const broken = `the Content-Type header \"application/json;;;\" is not a valid media type; the body must be application/json`
	job := func(detail string) string { return `"detail":"` + detail + `","error":"` + detail + `"}` }
	bad := func(path, msg string) string {
		return `"detail":"` + path + `: ` + msg + `","errors":["` + path + `: ` + msg + `"],"error":"` + path + `: ` + msg + `"}`
	}
	tests := []struct {
		name, method, path, auth, ctype, body string
		status                                int
		want                                  string // the body after its title and status
	}{
		{"no Content-Type on create", "POST", "/v2/serverless", "Bearer " + e.alice, "", minimalQueue, 415,
			`"detail":"` + missing + `"}`},
		{"no Content-Type on run", "POST", run, e.alice, "", `{"input":{}}`, 415, job(missing)},
		{"broken Content-Type", "POST", run, e.alice, "application/json;;;", `{"input":{}}`, 415, job(broken)},
		{"broken Content-Type, no body", "POST", run, e.alice, "application/json;;;", "", 415, job(broken)},
		{"no Content-Type, no body", "POST", run, e.alice, "", "", 400, job("a JSON body is required")},
		{"invalid UTF-8", "POST", run, e.alice, "application/json", "{\"input\":{\"prompt\":\"a\xffb\"}}", 400,
			bad("$.input.prompt", "is not valid UTF-8 (at byte offset 21 of the body)")},
		{"invalid UTF-8 in an array", "POST", run, e.alice, "application/json", "{\"input\":{\"p\":[\"ok\",{\"q\":\"\xc3\"}]}}", 400,
			bad("$.input.p[1].q", "is not valid UTF-8 (at byte offset 26 of the body)")},
		{"lone high surrogate", "POST", run, e.alice, "application/json", `{"input":{"prompt":"x\ud800y"}}`, 400,
			bad("$.input.prompt", `holds a lone surrogate escape (\\ud800): it is not Unicode text`)},
		{"lone low surrogate", "POST", run, e.alice, "application/json", `{"input":{"a":1,"b":"\uDC00"}}`, 400,
			bad("$.input.b", `holds a lone surrogate escape (\\uDC00): it is not Unicode text`)},
		{"reversed pair", "POST", run, e.alice, "application/json", `{"input":{"b":"\udc00\ud800"}}`, 400,
			bad("$.input.b", `holds a lone surrogate escape (\\udc00): it is not Unicode text`)},
		{"bad property name", "POST", run, e.alice, "application/json", `{"input":{"\ud800":1}}`, 400,
			bad(`$.input.\"\\\\ud800\"`, `the property name holds a lone surrogate escape (\\ud800): it is not Unicode text`)},
		{"management body", "POST", "/v2/serverless", "Bearer " + e.alice, "application/json", "{\"name\":\"\xff\"}", 400,
			`"detail":"$.name: is not valid UTF-8 (at byte offset 9 of the body)","errors":["$.name: is not valid UTF-8 (at byte offset 9 of the body)"]}`},
		{"a pair is text", "POST", run, e.alice, "application/json", `{"input":{"e":"\ud83d\ude00 \uD83D\uDE00"}}`, 200, ""},
		{"an escaped backslash is text", "POST", run, e.alice, "application/json", `{"input":{"e":"\\ud800"}}`, 200, ""},
		{"UTF-8 is text", "POST", run, e.alice, "application/json", `{"input":{"e":"héllo 😀"}}`, 200, ""},
		{"no Content-Type where no body is read", "POST", "/v2/" + id + "/purge-queue", e.alice, "", `{}`, 200, ""},
	}
	for _, tc := range tests {
		r := e.doRaw(tc.method, tc.path, tc.auth, tc.ctype, tc.body)
		if r.status != tc.status {
			t.Errorf("%s: %s %s = %d %s; want %d", tc.name, tc.method, tc.path, r.status, r.body, tc.status)
			continue
		}
		if tc.status == http.StatusOK {
			continue
		}
		want := `{"title":"` + http.StatusText(tc.status) + `","status":` + strconv.Itoa(tc.status) + `,` + tc.want
		if strings.TrimSpace(r.body) != want {
			t.Errorf("%s: body =\n %s\nwant\n %s", tc.name, r.body, want)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: Content-Type = %q; want application/problem+json", tc.name, ct)
		}
	}
}

// TestHealthzMethods: /healthz answers GET and HEAD; every other method is 405 with Allow.
func TestHealthzMethods(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, method := range []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"} {
		r := e.do(method, "/healthz", "", "")
		want := http.StatusMethodNotAllowed
		if method == "GET" || method == "HEAD" {
			want = http.StatusOK
		}
		if r.status != want {
			t.Errorf("%s /healthz = %d %s; want %d", method, r.status, r.body, want)
			continue
		}
		if want == http.StatusOK {
			continue
		}
		wantBody := `{"title":"Method Not Allowed","status":405,"detail":"` + method + ` is not allowed here; allowed: GET, HEAD"}`
		if strings.TrimSpace(r.body) != wantBody || r.header.Get("Allow") != "GET, HEAD" || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s /healthz = %s (Allow %q, Content-Type %q); want %s (Allow \"GET, HEAD\", problem+json)",
				method, r.body, r.header.Get("Allow"), r.header.Get("Content-Type"), wantBody)
		}
	}
}

// TestHeadFile: a produced file's signed URL answers HEAD as it answers GET, without the body.
func TestHeadFile(t *testing.T) {
	t.Parallel()
	e := modelEnv(t)
	id := e.do("POST", "/v2/gantry-image/run", e.alice, `{"input":{"prompt":"a cat","width":512,"height":512}}`).json(t)["id"].(string)
	if job, _ := e.takeModelJob("gantry-image", "w1"); job != id {
		t.Fatalf("took %s; want %s", job, id)
	}
	tok := e.engine.RegisterWorker("gantry-image", "w1")
	img := pngBytes(t, 64, 64)
	r := e.putFile("gantry-image", "w1", id, tok, "png", img)
	if r.status != 200 {
		t.Fatalf("job-file = %d %s", r.status, r.body)
	}
	path := strings.TrimPrefix(r.json(t)["url"].(string), "https://gantry.example")
	tests := []struct {
		name, path string
		status     int
		ctype      string
		length     string
	}{
		{"the file", path, 200, "image/png", strconv.Itoa(len(img))},
		{"a changed signature", path[:len(path)-2] + "xx", 403, "application/problem+json", ""},
	}
	for _, tc := range tests {
		r := e.do("HEAD", tc.path, "", "")
		if r.status != tc.status || r.header.Get("Content-Type") != tc.ctype || r.body != "" {
			t.Errorf("HEAD %s (%s) = %d %q with %d body bytes; want %d %q and no body", tc.path, tc.name, r.status, r.header.Get("Content-Type"), len(r.body), tc.status, tc.ctype)
		}
		if tc.length != "" && r.header.Get("Content-Length") != tc.length {
			t.Errorf("HEAD %s: Content-Length = %q; want %s", tc.path, r.header.Get("Content-Length"), tc.length)
		}
	}
}

// TestCleanPaths: a path that is not clean gets a 307 to the clean one, as http.ServeMux gives,
// but as problem+json.
func TestCleanPaths(t *testing.T) {
	t.Parallel()
	e := setup(t)
	mux := http.NewServeMux()
	mux.Handle("/", e.api)
	srv := httptest.NewServer(e.api.CleanPaths(mux))
	t.Cleanup(srv.Close)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct{ method, path, location string }{
		{"GET", "/v2//serverless", "/v2/serverless"},
		{"POST", "/v2/x/../serverless?limit=2", "/v2/serverless?limit=2"},
		{"GET", "/v2/./serverless/", "/v2/serverless/"},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := `{"title":"Temporary Redirect","status":307,"detail":"the path \"` + strings.Split(tc.path, "?")[0] +
			`\" is not clean; the same request to \"` + tc.location + `\" is the one meant"}`
		if resp.StatusCode != 307 || resp.Header.Get("Location") != tc.location || resp.Header.Get("Content-Type") != "application/problem+json" || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s %s = %d %q Location %q: %s; want 307 problem+json Location %q: %s", tc.method, tc.path,
				resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Location"), b, tc.location, want)
		}
	}
	if r, err := client.Get(srv.URL + "/healthz"); err != nil || r.StatusCode != 200 {
		t.Errorf("GET /healthz through CleanPaths = %v, %v; want 200", r, err)
	} else {
		r.Body.Close()
	}
}

// TestProblemListener: what net/http refuses before any handler (a head too large, a NUL in a
// header, an unknown transfer coding) is problem+json; other answers pass unchanged.
func TestProblemListener(t *testing.T) {
	t.Parallel()
	e := setup(t)
	mux := http.NewServeMux()
	mux.Handle("/", e.api)
	mux.HandleFunc("/plain", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, "400 Bad Request")
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.MaxHeaderBytes = 64 << 10
	srv.Listener = api.ProblemListener(srv.Listener, srv.Config.MaxHeaderBytes)
	srv.Start()
	t.Cleanup(srv.Close)
	big := strings.Repeat("a", 70<<10)
	const tooLarge = `{"title":"Request Header Fields Too Large","status":431,"detail":"the request line and headers are larger than this server's limit of 64 KB"}`
	tests := []struct {
		name, request string
		status        int
		want          string // the body; "" = not problem+json
	}{
		{"a URL over the limit", "GET /v2/serverless?x=" + big + " HTTP/1.1\r\nHost: a\r\n\r\n", 431, tooLarge},
		{"a header over the limit", "GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: " + big + "\r\n\r\n", 431, tooLarge},
		{"a NUL in a header", "GET /healthz HTTP/1.1\r\nHost: a\r\nX-A: b\x00c\r\n\r\n", 400,
			`{"title":"Bad Request","status":400,"detail":"the request could not be read as HTTP/1.1 (a malformed request line or header, such as a control character in a header)"}`},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", 400,
			`{"title":"Bad Request","status":400,"detail":"the request could not be read: missing required Host header"}`},
		{"an unknown transfer coding", "POST /healthz HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: zip\r\n\r\n", 501,
			`{"title":"Not Implemented","status":501,"detail":"the request's Transfer-Encoding is not supported"}`},
		{"a good request", "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 200, ""},
		{"a handler's 404", "GET /nope HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 404,
			`{"title":"Not Found","status":404,"detail":"no operation at /nope"}`},
		{"a handler's own text/plain 400 passes unchanged", "GET /plain HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 400, ""},
	}
	for _, tc := range tests {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		go func() { _, _ = io.WriteString(c, tc.request) }() // the server may answer before it reads all
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Errorf("%s: reading the answer: %v", tc.name, err)
			c.Close()
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s = %d %s; want %d", tc.name, resp.StatusCode, b, tc.status)
			continue
		}
		if tc.want == "" {
			if tc.status == http.StatusBadRequest && (resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || string(b) != "400 Bad Request") {
				t.Errorf("%s = %q %s; want the handler's text/plain answer", tc.name, resp.Header.Get("Content-Type"), b)
			}
			continue
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" || strings.TrimSpace(string(b)) != tc.want {
			t.Errorf("%s = %q %s; want application/problem+json %s", tc.name, ct, b, tc.want)
		}
		if resp.ContentLength != int64(len(b)) {
			t.Errorf("%s: Content-Length %d; the body has %d bytes", tc.name, resp.ContentLength, len(b))
		}
	}
}

// TestFileAnswersAreInert: a file that only starts as a GIF (GIF89a<html><script>...) is
// served as image/gif, with nosniff and a sandbox CSP, so that no browser runs it as a page of
// the console's origin; the refusals under /files carry both headers too.
func TestFileAnswersAreInert(t *testing.T) {
	t.Parallel()
	e := modelEnv(t)
	id := e.do("POST", "/v2/gantry-image/run", e.alice, `{"input":{"prompt":"a cat","width":512,"height":512}}`).json(t)["id"].(string)
	job, tok := e.takeModelJob("gantry-image", "w1")
	if job != id {
		t.Fatalf("took %s; want %s", job, id)
	}
	r := e.putFile("gantry-image", "w1", id, tok, "gif", []byte("GIF89a<html><script>alert(document.domain)</script></html>"))
	if r.status != 200 {
		t.Fatalf("job-file = %d %s", r.status, r.body)
	}
	path := strings.TrimPrefix(r.json(t)["url"].(string), "https://gantry.example")
	for _, tc := range []struct {
		name, method, path string
		status             int
	}{
		{"GET the file", "GET", path, 200},
		{"HEAD the file", "HEAD", path, 200},
		{"a changed signature", "GET", path[:len(path)-2] + "xx", 403},
		{"no such file", "GET", "/files/nope.gif?expires=1&sig=x", 403},
		{"another method", "POST", path, 405},
	} {
		r := e.do(tc.method, tc.path, "", "")
		if r.status != tc.status || r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("Content-Security-Policy") != "sandbox" {
			t.Errorf("%s: %s = %d, X-Content-Type-Options %q, Content-Security-Policy %q; want %d, nosniff, sandbox", tc.name, tc.method,
				r.status, r.header.Get("X-Content-Type-Options"), r.header.Get("Content-Security-Policy"), tc.status)
		}
	}
}

// TestFileQuotaRefusal: a worker's file past its job's file quota gets 413 problem+json that
// names the quota, and is not stored.
func TestFileQuotaRefusal(t *testing.T) {
	t.Parallel()
	e := setup(t, setupOpts{quota: core.Quota{Minute: 1000, Hour: 10000, Day: 100000}, models: true, fileJobQuota: 1 << 20})
	id := e.do("POST", "/v2/gantry-image/run", e.alice, `{"input":{"prompt":"a cat","width":512,"height":512}}`).json(t)["id"].(string)
	job, tok := e.takeModelJob("gantry-image", "w1")
	if job != id {
		t.Fatalf("took %s; want %s", job, id)
	}
	file := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 600<<10)...)
	if r := e.putFile("gantry-image", "w1", id, tok, "png", file); r.status != 200 {
		t.Fatalf("the first file = %d %s; want 200", r.status, r.body)
	}
	r := e.putFile("gantry-image", "w1", id, tok, "png", file)
	if r.status != http.StatusRequestEntityTooLarge || r.header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(r.body, "per-job file quota") || !strings.Contains(r.body, "1 MiB") {
		t.Errorf("the second file = %d %s; want 413 problem+json naming the per-job quota of 1 MiB", r.status, r.body)
	}
}
