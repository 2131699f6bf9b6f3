package lbproxy

import (
	"bufio"
	"context"
	"net"
	"sync"
	"time"
)

// The pool keeps the keep-alive connections to the workers that the proxy's connection loop
// (loop.go) writes requests on. Requests the loop does not carry go through
// httputil.ReverseProxy and its own http.Transport. Neither retries: a request that fails is
// answered with its error.

const (
	// fastBodyMax is the largest request body the loop writes before reading the answer:
	// it fits in the socket buffers, so a worker that answers early without reading it cannot
	// leave the loop stuck writing.
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
	used time.Time // when it last went idle
}

// pool keeps idle connections per worker address (host:port).
type pool struct {
	dialer    net.Dialer
	peekAfter time.Duration // defaultPeekAfter; tests set 0 to check every reuse

	mu    sync.Mutex
	idle  map[string][]*workerConn
	sweep *time.Timer // armed while any connection is idle
}

func newPool() *pool {
	return &pool{dialer: net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}, peekAfter: defaultPeekAfter,
		idle: map[string][]*workerConn{}}
}

// get returns an idle connection to addr that the worker has not closed, or a new one.
func (f *pool) get(ctx context.Context, addr string) (*workerConn, error) {
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
		_ = c.Close()
	}
	nc, err := f.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &workerConn{Conn: nc, br: bufio.NewReaderSize(nc, 4<<10)}, nil
}

// put keeps c for reuse.
func (f *pool) put(addr string, c *workerConn) {
	c.used = time.Now()
	f.mu.Lock()
	if len(f.idle[addr]) >= idleConnsPerWorker {
		f.mu.Unlock()
		_ = c.Close()
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
func (f *pool) closeIdle() {
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
		_ = c.Close()
	}
}
