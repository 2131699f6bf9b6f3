package api

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/core"
)

// The forwarder carries the common case of load-balanced traffic, a request whose body has a
// known, small length (a GET, a JSON POST) and that asks for no upgrade, over a pool of plain
// keep-alive connections to the workers: one write of the request, http.ReadResponse on the
// same goroutine, the body copied to the caller. http.Transport does the same exchange with a
// read and a write goroutine per connection, channels between them and a goroutine probing
// every bodiless request, which cost a proxied request about a third of its CPU on 2 cores.
// Everything else (upgrades, chunked or large uploads, Expect: 100-continue) goes through
// httputil.ReverseProxy. Neither retries: a request that fails is answered with its error.

const (
	// fastBodyMax is the largest request body the forwarder writes before reading the answer:
	// it fits in the socket buffers, so a worker that answers early without reading it cannot
	// leave the forwarder stuck writing.
	fastBodyMax = 64 << 10
	// idleConnsPerWorker bounds the idle connections kept to one worker.
	idleConnsPerWorker = 256
	// connIdleTimeout closes connections idle longer than this.
	connIdleTimeout = 30 * time.Second
	// defaultPeekAfter is how long a connection may sit idle before it is checked for a close
	// by the worker (a keep-alive timeout, a restart) before reuse. One taken back at once, as
	// under load, skips the check, which costs a syscall: as with http.Transport, a worker that
	// hangs up in that instant fails the request with a 502.
	defaultPeekAfter = time.Millisecond
)

// aLongTimeAgo is a deadline that has passed: setting it unblocks a connection's reads and
// writes at once.
var aLongTimeAgo = time.Unix(1, 0)

type workerConn struct {
	net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	used time.Time // when it last went idle
}

// forwarder keeps idle connections per worker address (host:port).
type forwarder struct {
	dialer    net.Dialer
	peekAfter time.Duration // defaultPeekAfter; tests set 0 to check every reuse

	mu    sync.Mutex
	idle  map[string][]*workerConn
	sweep *time.Timer // armed while any connection is idle
}

func newForwarder() *forwarder {
	return &forwarder{dialer: net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}, peekAfter: defaultPeekAfter,
		idle: map[string][]*workerConn{}}
}

// canForward says whether the forwarder may carry r.
func canForward(r *http.Request) bool {
	return r.ContentLength >= 0 && r.ContentLength <= fastBodyMax && len(r.TransferEncoding) == 0 &&
		r.Header.Get("Upgrade") == "" && r.Header.Get("Expect") == "" && r.ProtoMajor == 1
}

// get returns an idle connection to addr that the worker has not closed, or a new one.
func (f *forwarder) get(ctx context.Context, addr string) (*workerConn, error) {
	for {
		f.mu.Lock()
		conns := f.idle[addr]
		if len(conns) == 0 {
			f.mu.Unlock()
			break
		}
		c := conns[len(conns)-1]
		conns[len(conns)-1] = nil
		f.idle[addr] = conns[:len(conns)-1]
		f.mu.Unlock()
		if idle := time.Since(c.used); idle < connIdleTimeout && (idle < f.peekAfter || peerOpen(c.Conn)) {
			return c, nil
		}
		c.Close()
	}
	nc, err := f.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &workerConn{Conn: nc, br: bufio.NewReaderSize(nc, 4<<10), bw: bufio.NewWriterSize(nc, 4<<10)}, nil
}

// put keeps c for reuse.
func (f *forwarder) put(addr string, c *workerConn) {
	c.used = time.Now()
	f.mu.Lock()
	if len(f.idle[addr]) >= idleConnsPerWorker {
		f.mu.Unlock()
		c.Close()
		return
	}
	f.idle[addr] = append(f.idle[addr], c)
	if f.sweep == nil {
		f.sweep = time.AfterFunc(connIdleTimeout, f.closeIdle)
	}
	f.mu.Unlock()
}

// closeIdle closes the connections idle longer than connIdleTimeout (those of retired
// workers among them) and re-arms itself while any remain.
func (f *forwarder) closeIdle() {
	var stale []*workerConn
	f.mu.Lock()
	for addr, conns := range f.idle {
		kept := conns[:0]
		for _, c := range conns {
			if time.Since(c.used) >= connIdleTimeout {
				stale = append(stale, c)
			} else {
				kept = append(kept, c)
			}
		}
		clear(conns[len(kept):])
		if len(kept) == 0 {
			delete(f.idle, addr)
		} else {
			f.idle[addr] = kept
		}
	}
	if len(f.idle) > 0 {
		f.sweep.Reset(connIdleTimeout)
	} else {
		f.sweep = nil
	}
	f.mu.Unlock()
	for _, c := range stale {
		c.Close()
	}
}

// hopHeaders are the hop-by-hop headers (RFC 9110 7.6.1) a proxy does not forward.
var hopHeaders = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// skipHeader says whether a header of the caller's request stays out of the forwarded one:
// hop-by-hop headers, those the caller's Connection header names, the caller's key (Gantry's
// business, not the worker's), and the framing and forwarding headers the forwarder writes
// itself.
func skipHeader(k string, connection []string) bool {
	switch k {
	case "Authorization", "Host", "Content-Length", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
		return true
	}
	return hopHeaders[k] || namedIn(connection, k)
}

func namedIn(connection []string, k string) bool {
	for _, v := range connection {
		for f := range strings.SplitSeq(v, ",") {
			if textproto.TrimString(f) != "" && strings.EqualFold(textproto.TrimString(f), k) {
				return true
			}
		}
	}
	return false
}

// forward sends r to the worker at base and copies its answer to w. It reports the worker's
// failure as a 502 problem; it returns quietly when the caller went away.
func (a *API) forward(w http.ResponseWriter, r *http.Request, base *url.URL, t *lbTarget) {
	ctx := r.Context()
	c, err := a.fwd.get(ctx, base.Host)
	if err != nil {
		a.badGateway(w, r, t, err)
		return
	}
	// A caller that goes away unblocks the exchange: the connection is then closed, not kept.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	reuse, err := a.exchange(w, r, c, base, t)
	if !stop() {
		reuse = false
	}
	if reuse {
		a.fwd.put(base.Host, c)
	} else {
		c.Close()
	}
	switch {
	case errors.Is(err, errCutShort):
		// The answer has begun: abort it, so that the caller sees it cut short rather than
		// a complete answer with a piece missing.
		panic(http.ErrAbortHandler)
	case err != nil && ctx.Err() == nil:
		a.badGateway(w, r, t, err)
	}
}

// errCutShort says that the worker's answer broke off after its head was relayed.
var errCutShort = errors.New("the worker's answer broke off")

// exchange writes the request, reads the answer and copies it to w. It returns whether the
// connection is fit for another request, and an error only while nothing has been written
// to w (after that, a failure can only cut the answer short).
func (a *API) exchange(w http.ResponseWriter, r *http.Request, c *workerConn, base *url.URL, t *lbTarget) (reuse bool, err error) {
	if err := writeRequest(c.bw, r, base.Host, t); err != nil {
		return false, err
	}
	var resp *http.Response
	for {
		if resp, err = http.ReadResponse(c.br, r); err != nil {
			return false, err
		}
		if resp.StatusCode >= 200 {
			break
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return false, errors.New("it switched protocols on a request that asked for no upgrade")
		}
		// 1xx informational answers (103 Early Hints) are not relayed.
	}
	defer resp.Body.Close()
	h := w.Header()
	connection := resp.Header["Connection"]
	for k, vv := range resp.Header {
		if !hopHeaders[k] && !namedIn(connection, k) {
			h[k] = vv
		}
	}
	if len(resp.Trailer) > 0 {
		names := make([]string, 0, len(resp.Trailer))
		for k := range resp.Trailer {
			names = append(names, k)
		}
		h["Trailer"] = []string{strings.Join(names, ", ")}
	}
	w.WriteHeader(resp.StatusCode)
	buf := buffers.Get().(*[]byte)
	defer buffers.Put(buf)
	// A body of unknown length or an event stream is flushed as it comes, so streams stream.
	flush := resp.ContentLength < 0 || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if readErr, writeErr := copyBody(w, resp.Body, *buf, flush); readErr != nil {
		return false, errCutShort
	} else if writeErr != nil {
		return false, nil // the caller went away
	}
	for k, vv := range resp.Trailer {
		h[http.TrailerPrefix+k] = vv
	}
	return !resp.Close, nil
}

// writeRequest writes r as the worker is to see it: the path after /lb/{id}, the caller's
// headers less hop-by-hop ones and the key, X-Forwarded-For/Host/Proto, and the body.
func writeRequest(bw *bufio.Writer, r *http.Request, host string, t *lbTarget) error {
	target := &url.URL{Path: t.path, RawQuery: r.URL.RawQuery}
	if t.hasRawPath {
		target.RawPath = t.raw
	}
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	bw.WriteString(target.RequestURI())
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	connection := r.Header["Connection"]
	for k, vv := range r.Header {
		if skipHeader(k, connection) {
			continue
		}
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	writeForwarded(bw, r)
	if r.ContentLength > 0 || (r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions) {
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.FormatInt(r.ContentLength, 10))
		bw.WriteString("\r\n")
	}
	bw.WriteString("\r\n")
	if r.ContentLength > 0 {
		if _, err := io.CopyN(bw, r.Body, r.ContentLength); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// writeForwarded writes the X-Forwarded-* headers as httputil.ProxyRequest.SetXForwarded sets
// them: the caller's address appended to any X-Forwarded-For it sent, the Host it asked for
// and its scheme.
func writeForwarded(bw *bufio.Writer, r *http.Request) {
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		bw.WriteString("X-Forwarded-For: ")
		for _, prior := range r.Header["X-Forwarded-For"] {
			bw.WriteString(prior)
			bw.WriteString(", ")
		}
		bw.WriteString(ip)
		bw.WriteString("\r\n")
	}
	if r.Host != "" {
		bw.WriteString("X-Forwarded-Host: ")
		bw.WriteString(r.Host)
		bw.WriteString("\r\n")
	}
	if r.TLS != nil {
		bw.WriteString("X-Forwarded-Proto: https\r\n")
	} else {
		bw.WriteString("X-Forwarded-Proto: http\r\n")
	}
}

// copyBody copies an answer's body to the caller, flushing after each read when told to; it
// tells a failed read from the worker from a failed write to the caller.
func copyBody(w http.ResponseWriter, body io.Reader, buf []byte, flush bool) (readErr, writeErr error) {
	flusher, _ := w.(http.Flusher)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return nil, err
			}
			if flush && flusher != nil {
				flusher.Flush()
			}
		}
		if rerr == io.EOF {
			return nil, nil
		}
		if rerr != nil {
			return rerr, nil
		}
	}
}

func (a *API) badGateway(w http.ResponseWriter, r *http.Request, t *lbTarget, err error) {
	a.writeProblem(w, r, &core.Error{Kind: kindBadGateway, Detail: "the worker of endpoint " + t.endpoint + " did not answer: " + err.Error()})
}
