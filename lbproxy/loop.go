package lbproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gantryhq/gantry/core"
)

// A caller's keep-alive HTTP/1.1 connection that sends plain load-balanced requests is taken
// from net/http (hijacked) at its first such request and served by a small loop, callerConn:
// each request head is scanned in place, the worker gets it in one write with the same
// header lines (less hop-by-hop ones and the key, plus X-Forwarded-*), and the worker's
// answer head and body are relayed as they come, chunked bodies chunk by chunk. net/http's
// per-request machinery (header maps, a context and a background read per request, the
// response writer) was most of what the proxy cost on top of the two loopback round trips.
//
// The loop carries only what it can carry exactly: an HTTP/1.1 request for /lb/ with a known
// body of at most fastBodyMax, no upgrade, no Expect, no Transfer-Encoding, a clean path
// without escapes, and a head that fits the connection's read buffer. Any other request is
// handed back, unread, to the http.Server the connection came from (handBack), which serves
// it and the rest of the connection as it serves any other. Nothing is retried: a worker that fails a request before
// its answer begins gets the caller a 502 problem, one that fails it later cuts the answer
// short (the caller's connection is closed, so it cannot pass for complete).

const (
	// watchAfter is how long a request may wait for its worker before the loop starts
	// watching the caller's connection for a hang-up, which frees the worker's connection
	// (net/http watches from the start of every request; that costs a goroutine each).
	watchAfter = 20 * time.Millisecond
	// keepBuffer is the most request buffer an idle connection keeps for its next request.
	keepBuffer = 8 << 10
	// maxAnswerHead bounds a worker's answer head.
	maxAnswerHead = 1 << 20
)

// errCutShort says that the worker's answer broke off after its head was relayed.
var errCutShort = errors.New("the worker's answer broke off")

// callerConn is one hijacked caller connection.
type callerConn struct {
	p      *Proxy
	srv    *http.Server
	conn   net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	ctx    context.Context // carries rw for the rate-limit headers; ends when the caller hangs up
	cancel context.CancelFunc
	// wait is ctx, ended also when the server stops serving: it bounds a wait for a worker.
	wait   context.Context
	rw     rawResponse // the rate-limit headers and problems of the request being served
	status int         // the worker's status relayed for the request being served; 0 = none yet
	remote string      // the caller's IP, for X-Forwarded-For

	q    request
	body []byte    // the request body, read before the worker is picked
	out  []byte    // the request head and body as the worker gets them
	ab   answerBuf // the worker's answer head

	watch     *time.Timer
	watchDone chan struct{}
	worker    *workerConn // the worker connection of the exchange in flight, for the watcher
	workerMu  sync.Mutex
}

// request is a request the loop carries, as scanned from its head.
type request struct {
	method, target string // target: the raw request-target, /lb/{id}...
	id, rest       string // the endpoint id, and the target after /lb/{id}
	host, authz    string
	length         int64
	close          bool
	fields         []byte // the header lines the worker gets, each "Name: value\r\n"
	xff            []byte // the X-Forwarded-For values the caller sent, joined by ", "
}

// canLoop says whether r may start a loop: the loop's conditions, checked on the parsed
// request net/http hands over.
func canLoop(r *http.Request) bool {
	return r.ProtoMajor == 1 && r.ProtoMinor == 1 && !r.Close && r.TLS == nil &&
		r.ContentLength >= 0 && r.ContentLength <= fastBodyMax && len(r.TransferEncoding) == 0 &&
		r.Header.Get("Upgrade") == "" && r.Header.Get("Expect") == "" &&
		len(r.RequestURI) > len(Prefix) && r.RequestURI[:len(Prefix)] == Prefix && cleanTarget(r.RequestURI)
}

// loop hijacks r's connection and serves r and the connection's later requests in a
// callerConn. It returns false, having done nothing, when the connection cannot be hijacked.
func (p *Proxy) loop(w http.ResponseWriter, r *http.Request) bool {
	srv, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
	if srv == nil {
		return false
	}
	// The body must be read before the hijack, which ends net/http's hold on it.
	var body []byte
	if r.ContentLength > 0 {
		body = make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			p.adm.Refuse(r.Context(), w, r, core.Errorf(core.KindMalformed, "reading the body: %v", err))
			return true
		}
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		r.Body = io.NopCloser(bytes.NewReader(body)) // for the general proxy
		return false
	}
	if hc, ok := conn.(*handedConn); ok && hc.br.Buffered() == 0 {
		conn = hc.Conn // a connection handed back before: drop the drained wrapper
	}
	// The hijacked reader reads through net/http's connection reader, whose read errors (the
	// deadlines that stop a watch among them) cancel the connection's context: read the
	// connection itself, after what that reader holds.
	var src io.Reader = conn
	if n := brw.Reader.Buffered(); n > 0 {
		held, _ := brw.Reader.Peek(n)
		src = io.MultiReader(bytes.NewReader(bytes.Clone(held)), conn)
	}
	c := &callerConn{p: p, srv: srv, conn: conn, br: bufio.NewReaderSize(src, 4<<10), bw: brw.Writer, body: body, watchDone: make(chan struct{}, 1)}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		c.remote = ip
	}
	// The request's context ends when the server stops serving (gantry serve cancels its base
	// context then, to end long polls at once). The loop's exchanges do not end with it: an
	// answer in progress finishes, as Proxy.Shutdown promises; only a wait for a worker does.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	c.ctx, c.cancel = p.adm.WithWriter(ctx, &c.rw), cancel
	wait, stopWait := context.WithCancel(c.ctx)
	defer context.AfterFunc(r.Context(), stopWait)()
	c.wait = wait
	c.rw.h = http.Header{}
	c.watch = time.AfterFunc(time.Hour, c.watchCaller) // made stopped; armWatch sets it going
	c.watch.Stop()
	stopping := !p.callers.add(c)
	defer p.callers.remove(c)
	defer cancel()
	c.fromRequest(r)
	c.q.close = stopping // the server is shutting down: serve this request, then close
	c.serve()
	return true
}

// fromRequest fills c.q from the request net/http parsed.
func (c *callerConn) fromRequest(r *http.Request) {
	q := &c.q
	q.method, q.target, q.host, q.length = r.Method, r.RequestURI, r.Host, r.ContentLength
	q.id, q.rest = splitTarget(q.target)
	q.authz = r.Header.Get("Authorization")
	q.fields, q.xff = q.fields[:0], q.xff[:0]
	var conn []byte // the names r's Connection header lists (see appendNames)
	for _, v := range r.Header["Connection"] {
		conn = appendNames(conn, v)
	}
	for _, v := range r.Header["X-Forwarded-For"] {
		q.xff = appendList(q.xff, v)
	}
	for k, vv := range r.Header {
		if inList(k, hopByHop) || inList(k, notForwarded) {
			continue
		}
		for _, v := range vv {
			q.fields = append(append(append(append(q.fields, k...), ": "...), v...), "\r\n"...)
		}
	}
	q.fields = dropNamed(q.fields, conn)
}

// serve serves c.q, then the connection's next requests, until the caller or the server
// ends it or a request must be handed back.
func (c *callerConn) serve() {
	for {
		keep := c.serveOne()
		if !keep || c.q.close {
			_ = c.conn.Close()
			return
		}
		if cap(c.body) > keepBuffer || cap(c.out) > keepBuffer {
			c.body, c.out = nil, nil // an idle connection does not hold on to a large body
		}
		ok, err := c.next()
		switch {
		case err != nil:
			_ = c.conn.Close()
			return
		case !ok:
			c.p.handBack(c.srv, &handedConn{Conn: c.conn, br: c.br})
			return
		}
	}
}

// bareLF says whether a line of b ends in a LF without a CR before it.
func bareLF(b []byte) bool {
	for i := bytes.IndexByte(b, '\n'); i >= 0; {
		if i == 0 || b[i-1] != '\r' {
			return true
		}
		j := bytes.IndexByte(b[i+1:], '\n')
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}

// next waits for the connection's next request and scans its head into c.q, with its body in
// c.body. It returns false, having consumed nothing, for a request the loop does not carry.
func (c *callerConn) next() (bool, error) {
	idle, header := c.timeouts()
	if idle > 0 {
		_ = c.conn.SetReadDeadline(time.Now().Add(idle))
	}
	if c.p.callers.closing() {
		// Checked again after the deadline is set: a shutdown that began since has set (or
		// will set) its own deadline, which ends the wait below at once.
		return false, net.ErrClosed
	}
	if _, err := c.br.Peek(1); err != nil {
		return false, err // the caller hung up, or stayed idle too long
	}
	if header > 0 {
		_ = c.conn.SetReadDeadline(time.Now().Add(header))
	}
	var head []byte
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 {
			head = buf[:i+4]
			break
		}
		if bareLF(buf) {
			return false, nil // lines ending in a bare LF, which net/http accepts and scan does not
		}
		if c.br.Buffered() == c.br.Size() {
			return false, nil // a head larger than the buffer: net/http reads it
		}
		if _, err := c.br.Peek(c.br.Buffered() + 1); err != nil {
			if c.br.Buffered() > 0 && !errors.Is(err, io.EOF) {
				return false, nil // let net/http answer the partial head (a timeout: 408)
			}
			return false, err
		}
	}
	if !c.q.scan(head) {
		return false, nil
	}
	_, _ = c.br.Discard(len(head))
	c.body = c.body[:0]
	if c.q.length > 0 {
		c.body = slices.Grow(c.body, int(c.q.length))[:c.q.length]
		if _, err := io.ReadFull(c.br, c.body); err != nil {
			return false, err
		}
	}
	_ = c.conn.SetReadDeadline(time.Time{})
	return true, nil
}

// timeouts are the server's idle and header-read timeouts, as net/http applies them.
func (c *callerConn) timeouts() (idle, header time.Duration) {
	idle, header = c.srv.IdleTimeout, c.srv.ReadHeaderTimeout
	if idle == 0 {
		idle = c.srv.ReadTimeout
	}
	if header == 0 {
		header = c.srv.ReadTimeout
	}
	return idle, header
}

// serveOne admits c.q (key, rate limits, endpoint, a ready worker) and forwards it, or answers
// why not. It returns whether the connection may carry another request.
func (c *callerConn) serveOne() bool {
	q := &c.q
	clear(c.rw.h)
	c.rw.status, c.rw.body = 0, c.rw.body[:0]
	problemReq := func() *http.Request {
		return &http.Request{Method: q.method, URL: &url.URL{Path: targetPath(q.target)}, Header: http.Header{}}
	}
	start := time.Now()
	c.armWatch()
	t, release, err := c.p.adm.Admit(c.wait, q.id, q.authz)
	if err != nil {
		c.disarmWatch()
		if c.ctx.Err() != nil {
			return false // the caller went away while it waited for a worker
		}
		// The server stops, or the request must come on a new connection: answer, then close.
		q.close = q.close || c.wait.Err() != nil || errors.Is(err, ErrReconnect)
		c.p.adm.Refuse(c.ctx, &c.rw, problemReq(), err)
		keep := c.writeRaw(q)
		c.p.observe(t.Endpoint, c.rw.status, start)
		return keep
	}
	c.status = 0
	keep, err := c.exchange(t.Host, q)
	c.disarmWatch()
	release()
	switch {
	case errors.Is(err, errCutShort):
		c.p.observe(t.Endpoint, c.status, start) // its head was relayed
		return false
	case err != nil && c.ctx.Err() == nil:
		c.p.adm.Refuse(c.ctx, &c.rw, problemReq(), &WorkerError{Endpoint: t.Endpoint, Err: err})
		keep := c.writeRaw(q)
		c.p.observe(t.Endpoint, c.rw.status, start)
		return keep
	}
	c.p.observe(t.Endpoint, c.status, start) // 0 (not observed): the caller went away first
	return keep && c.ctx.Err() == nil
}

// exchange writes c.q to a connection to the worker at addr and relays its answer. It
// returns an error only while nothing has been written to the caller, or errCutShort.
func (c *callerConn) exchange(addr string, q *request) (keep bool, err error) {
	wc, err := c.p.pool.get(c.ctx, addr)
	if err != nil {
		return false, err
	}
	c.setWorker(wc)
	reuse := false
	defer func() {
		c.setWorker(nil)
		if reuse && c.ctx.Err() == nil {
			c.p.pool.put(addr, wc)
		} else {
			_ = wc.Close()
		}
	}()
	out := c.out[:0]
	out = append(append(append(append(out, q.method...), ' '), q.rest...), " HTTP/1.1\r\nHost: "...)
	out = append(append(append(out, addr...), "\r\n"...), q.fields...)
	if c.remote != "" {
		out = append(append(append(append(out, "X-Forwarded-For: "...), q.xff...), c.remote...), "\r\n"...)
	}
	if q.host != "" {
		out = append(append(append(out, "X-Forwarded-Host: "...), q.host...), "\r\n"...)
	}
	out = append(out, "X-Forwarded-Proto: http\r\n"...)
	if q.length > 0 || (q.method != http.MethodGet && q.method != http.MethodHead && q.method != http.MethodOptions) {
		out = strconv.AppendInt(append(out, "Content-Length: "...), q.length, 10)
		out = append(out, "\r\n"...)
	}
	out = append(append(out, "\r\n"...), c.body...)
	c.out = out
	if _, err := wc.Write(out); err != nil {
		return false, err
	}
	var a answer
	if err := a.readFinal(wc.br, &c.ab, q.method == http.MethodHead); err != nil {
		return false, err
	}
	closing := q.close || c.p.callers.closing()
	c.status = a.status
	c.writeAnswerHead(&a, closing)
	// From here on a failure can only cut the answer short.
	if rerr, werr := relayBody(c.bw, wc.br, &a); rerr != nil || werr != nil {
		return false, errCutShort // the worker broke off, or the caller went away
	}
	reuse = !a.close && !(a.length < 0 && !a.chunked && !a.noBody)
	return !closing, nil
}

// writeAnswerHead writes the head of the worker's answer a to the caller: its status, its
// header lines less hop-by-hop ones, the rate-limit headers, a Date when the worker sent none,
// and the framing the caller gets.
func (c *callerConn) writeAnswerHead(a *answer, closing bool) {
	b := c.bw
	b.WriteString("HTTP/1.1 ")
	b.Write(a.statusLine)
	b.WriteString("\r\n")
	b.Write(a.fields)
	for k, vv := range c.rw.h {
		for _, v := range vv {
			b.WriteString(k)
			b.WriteString(": ")
			b.WriteString(v)
			b.WriteString("\r\n")
		}
	}
	if !a.hasDate {
		b.WriteString("Date: ")
		b.WriteString(time.Now().UTC().Format(http.TimeFormat))
		b.WriteString("\r\n")
	}
	switch {
	case a.length < 0 && !a.noBody: // chunked from the worker, or until it closes
		b.WriteString("Transfer-Encoding: chunked\r\n")
	case a.length >= 0 && a.status != http.StatusNoContent: // HEAD and 304 tell the length GET would get
		b.WriteString("Content-Length: ")
		b.WriteString(strconv.FormatInt(a.length, 10))
		b.WriteString("\r\n")
	}
	if closing {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n")
}

// writeRaw writes c.rw (a problem) as the answer to q. It returns whether the connection may
// carry another request.
func (c *callerConn) writeRaw(q *request) bool {
	closing := q.close || c.p.callers.closing()
	b := c.bw
	b.WriteString("HTTP/1.1 ")
	b.WriteString(strconv.Itoa(c.rw.status))
	b.WriteByte(' ')
	b.WriteString(http.StatusText(c.rw.status))
	b.WriteString("\r\n")
	c.rw.h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	if closing {
		c.rw.h.Set("Connection", "close")
	}
	_ = c.rw.h.Write(b) // into the bufio.Writer, whose error Flush returns
	b.WriteString("\r\n")
	if q.method != http.MethodHead {
		b.Write(c.rw.body)
	}
	return b.Flush() == nil && !closing
}

// armWatch starts the timer after which the caller's connection is watched for a hang-up.
func (c *callerConn) armWatch() { c.watch.Reset(watchAfter) }

// disarmWatch stops the watch and, when it had started, waits for it to end, so that this
// goroutine may read the caller's connection again.
func (c *callerConn) disarmWatch() {
	if c.watch.Stop() {
		return
	}
	_ = c.conn.SetReadDeadline(aLongTimeAgo)
	<-c.watchDone
	_ = c.conn.SetReadDeadline(time.Time{})
}

// watchCaller runs on the watch timer's goroutine: it waits for the caller to send something
// (a pipelined request: it is alive) or hang up, in which case the request is abandoned: its
// context ends and its worker connection is closed (the worker sees the hang-up).
func (c *callerConn) watchCaller() {
	defer func() { c.watchDone <- struct{}{} }()
	if _, err := c.br.Peek(1); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		c.cancel()
		c.workerMu.Lock()
		if c.worker != nil {
			_ = c.worker.SetDeadline(aLongTimeAgo)
		}
		c.workerMu.Unlock()
	}
}

func (c *callerConn) setWorker(wc *workerConn) {
	c.workerMu.Lock()
	c.worker = wc
	if wc != nil && c.ctx.Err() != nil {
		_ = wc.SetDeadline(aLongTimeAgo)
	}
	c.workerMu.Unlock()
}

// rawResponse is the http.ResponseWriter the loop renders problems and rate-limit headers into.
type rawResponse struct {
	h      http.Header
	status int
	body   []byte
}

func (w *rawResponse) Header() http.Header { return w.h }
func (w *rawResponse) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}
func (w *rawResponse) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, p...)
	return len(p), nil
}
