package testkit

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// RawConn is a client's keep-alive HTTP/1.1 connection, written and read by hand: for tests of
// what net/http's client would not send (pipelined requests, bare LF line ends, protocol
// switches) or would hide (the order of answers on one connection, a connection closed).
type RawConn struct {
	t    testing.TB
	Conn net.Conn
	Br   *bufio.Reader // what the server sent, buffered
	Host string        // the server's host:port, for Host lines
}

// RawConnTimeout bounds every read and write on a RawConn.
const RawConnTimeout = 10 * time.Second

// DialRaw connects to the server at base (a URL); the connection closes when the test ends.
func DialRaw(t testing.TB, base string) *RawConn {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(RawConnTimeout))
	return &RawConn{t: t, Conn: conn, Br: bufio.NewReader(conn), Host: u.Host}
}

// Send writes s as it is.
func (c *RawConn) Send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.Conn, s); err != nil {
		c.t.Fatal(err)
	}
}

// Get returns a GET request for path with the bearer key and extra header lines
// ("Name: value\r\n").
func (c *RawConn) Get(path, key, extra string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: " + c.Host + "\r\nAuthorization: Bearer " + key + "\r\n" + extra + "\r\n"
}

// Read reads the next answer, to a request with the method, and its whole body.
func (c *RawConn) Read(method string) (*http.Response, string) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.Br, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("reading an answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("reading an answer's body: %v", err)
	}
	return resp, string(b)
}
