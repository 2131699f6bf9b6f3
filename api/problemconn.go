package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// ProblemListener wraps ln so that the answers net/http writes itself, before any handler, to
// a request it cannot read (431 for a request line and headers over maxHeaderBytes, 400 for
// a malformed request such as a NUL in a header, 501 for an unknown transfer coding) are
// application/problem+json like every other error, instead of text/plain. maxHeaderBytes is
// the server's MaxHeaderBytes, named in the 431's detail.
func ProblemListener(ln net.Listener, maxHeaderBytes int) net.Listener {
	return &problemListener{Listener: ln, limit: maxHeaderBytes}
}

type problemListener struct {
	net.Listener
	limit int
}

func (l *problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &problemConn{Conn: c, limit: l.limit}, nil
}

// problemConn rewrites net/http's canned error answers. net/http writes each as one Write
// straight to the connection: "HTTP/1.1 <code> <text>[: <why>]", a text/plain Content-Type
// and Connection: close, then the status line's text as the body. Every other answer has a
// Date header (and goes through net/http's buffered writer), so nothing else matches.
type problemConn struct {
	net.Conn
	limit int
}

// cannedHeaders is what net/http's canned answers carry between their status line and body.
const cannedHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c *problemConn) Write(p []byte) (int, error) {
	// The cheap test first: this runs on every write of every answer.
	if len(p) < 13 || p[9] < '4' || p[9] > '5' || !bytes.HasPrefix(p, []byte("HTTP/1.1 ")) {
		return c.Conn.Write(p)
	}
	if out := c.rewrite(p); out != nil {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// CloseWrite lets net/http half-close the connection after a 431, so the caller reads it
// before the close.
func (c *problemConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ReadFrom keeps net/http's sendfile path for the files it serves (GetFile).
func (c *problemConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// rewrite returns the problem+json form of a canned answer, or nil when p is not one.
func (c *problemConn) rewrite(p []byte) []byte {
	head, body, ok := bytes.Cut(p, []byte(cannedHeaders))
	if !ok || bytes.Contains(head, []byte("\r\n")) || bytes.Contains(body, []byte("\r\n")) {
		return nil // not the canned shape: a status line, those two headers, a one-line body
	}
	line := string(head[len("HTTP/1.1 "):])
	if len(line) < 4 || line[3] != ' ' {
		return nil
	}
	code, err := strconv.Atoi(line[:3])
	if err != nil {
		return nil
	}
	_, why, _ := strings.Cut(line[4:], ": ")
	var detail string
	switch {
	case code == http.StatusRequestHeaderFieldsTooLarge:
		detail = "the request line and headers are larger than this server's limit of " + kbSize(c.limit)
	case code == http.StatusNotImplemented:
		detail = "the request's Transfer-Encoding is not supported"
	case why != "":
		detail = "the request could not be read: " + why
	default:
		detail = "the request could not be read as HTTP/1.1 (a malformed request line or header, such as a control character in a header)"
	}
	pb, _ := json.Marshal(problem{Title: http.StatusText(code), Status: code, Detail: detail})
	pb = append(pb, '\n')
	out := make([]byte, 0, 160+len(pb))
	out = append(out, "HTTP/1.1 "...)
	out = strconv.AppendInt(out, int64(code), 10)
	out = append(out, ' ')
	out = append(out, http.StatusText(code)...)
	out = append(out, "\r\nContent-Type: application/problem+json\r\nContent-Length: "...)
	out = strconv.AppendInt(out, int64(len(pb)), 10)
	out = append(out, "\r\nConnection: close\r\n\r\n"...)
	return append(out, pb...)
}

// kbSize renders a head limit the way people read it ("64 KB").
func kbSize(n int) string {
	if n >= 1<<10 && n%(1<<10) == 0 {
		return strconv.Itoa(n>>10) + " KB"
	}
	return strconv.Itoa(n) + " bytes"
}
