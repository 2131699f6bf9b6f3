package servertest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Do sends one request to url with http.DefaultClient and returns the answer's status,
// header and whole body. auth is the Authorization header as sent ("" = none); a non-empty
// body goes as JSON. A request that gets no answer fails the test.
func Do(tb testing.TB, method, url, auth, body string) (int, http.Header, []byte) {
	tb.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("%s %s: reading the answer: %v", method, url, err)
	}
	return resp.StatusCode, resp.Header, b
}

// Call is Do with a bearer key ("" = none), returning the status and the body.
func Call(tb testing.TB, method, url, key, body string) (int, string) {
	tb.Helper()
	auth := ""
	if key != "" {
		auth = "Bearer " + key
	}
	code, _, b := Do(tb, method, url, auth, body)
	return code, string(b)
}

// Expect is Call that fails the test unless the answer's status is want, decodes the JSON
// body into into when into is not nil, and returns the body.
func Expect(tb testing.TB, method, url, key, body string, want int, into any) string {
	tb.Helper()
	code, b := Call(tb, method, url, key, body)
	if code != want {
		tb.Fatalf("%s %s = %d %s; want %d", method, url, code, b, want)
	}
	if into != nil {
		if err := json.Unmarshal([]byte(b), into); err != nil {
			tb.Fatalf("%s %s: %v in %s", method, url, err, b)
		}
	}
	return b
}
