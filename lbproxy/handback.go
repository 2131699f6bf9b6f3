package lbproxy

import (
	"bufio"
	"net"
	"net/http"
	"sync"
)

// A connection the loop cannot carry on is handed back to the http.Server it was taken from,
// through a listener of its own that the server serves as it serves its real one.

// handedConn is a connection handed back to net/http, with what the loop had read of it.
type handedConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *handedConn) Read(p []byte) (int, error) { return c.br.Read(p) }

// handoff is a net.Listener whose connections are those the loops hand back to a server.
type handoff struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.ch:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error   { h.once.Do(func() { close(h.done) }); return nil }
func (h *handoff) Addr() net.Addr { return h.addr }

// handBack gives conn, unread beyond what its wrapper holds, to srv, which serves it from its
// next request on as it serves connections it accepted itself (and shuts it down with them).
func (p *Proxy) handBack(srv *http.Server, conn *handedConn) {
	v, ok := p.handoffs.Load(srv)
	if !ok {
		h := &handoff{ch: make(chan net.Conn), done: make(chan struct{}), addr: conn.LocalAddr()}
		if v, ok = p.handoffs.LoadOrStore(srv, h); !ok {
			go func() {
				_ = srv.Serve(h) // ends when srv shuts down (or was already)
				_ = h.Close()
			}()
		}
	}
	h := v.(*handoff)
	select {
	case h.ch <- conn:
	case <-h.done:
		_ = conn.Close() // the server has shut down
	}
}
