package scaleout_test

import (
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
)

// tcpProxy relays connections from a 127.0.0.1 port to target. Cut plays an outage: every
// open connection closes and new ones are closed at once, until Mend.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.Cut() })
	return p
}

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.relay(c)
	}
}

func (p *tcpProxy) relay(c net.Conn) {
	if !p.track(c) {
		c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(up) {
		c.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
	c.Close()
}

// track remembers c for Cut; false while the proxy is down.
func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = true
	return true
}

// Cut closes every relayed connection and refuses new ones until Mend.
func (p *tcpProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Mend relays new connections again.
func (p *tcpProxy) Mend() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// TestStoreOutage: two replicas reach PostgreSQL through a proxy that is cut. Both the
// leader and the follower then answer /healthz 503 with Retry-After, and a request answers
// 503 with Retry-After whether its key is in a replica's cache or not (never 500); once
// PostgreSQL is reachable again, /healthz answers 200 and requests are served.
func TestStoreOutage(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	rs := make([]*server.Server, 2)
	for i := range rs {
		rs[i] = servertest.New(t, server.Config{Store: u.String()}, server.Options{Tick: time.Hour, LeaseTTL: leaseTTL})
	}
	leader(t, rs)
	key := servertest.Key(t, rs[0], "alice", core.ScopeAll)
	for i, r := range rs {
		if code, body := call(t, "GET", r.URL()+"/healthz", "", ""); code != 200 {
			t.Fatalf("replica %d /healthz before the outage = %d %s; want 200", i, code, body)
		}
		if code, body := call(t, "GET", r.URL()+"/v2/serverless", key, ""); code != 200 {
			t.Fatalf("replica %d GET /v2/serverless before the outage = %d %s; want 200", i, code, body)
		}
	}

	proxy.Cut()
	for i, r := range rs {
		testkit.EventuallyWithin(t, 5*time.Second, "the replica's /healthz to say the store is down", func() bool {
			code, _, _ := servertest.Do(t, "GET", r.URL()+"/healthz", "", "")
			return code == 503
		})
		code, h, b := servertest.Do(t, "GET", r.URL()+"/healthz", "", "")
		if code != 503 || h.Get("Retry-After") != "1" || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(b), "store cannot be reached") {
			t.Errorf("replica %d /healthz in the outage = %d (Retry-After %q, %s) %s; want 503 problem+json, Retry-After 1", i, code, h.Get("Retry-After"), h.Get("Content-Type"), b)
		}
		for _, k := range []string{key, core.NewKeySecret()} {
			code, h, b := servertest.Do(t, "GET", r.URL()+"/v2/serverless", "Bearer "+k, "")
			if code != 503 || h.Get("Retry-After") != "1" || h.Get("Content-Type") != "application/problem+json" {
				t.Errorf("replica %d GET /v2/serverless in the outage = %d (Retry-After %q) %s; want 503 problem+json, Retry-After 1", i, code, h.Get("Retry-After"), b)
			}
		}
	}

	proxy.Mend()
	for _, r := range rs {
		testkit.EventuallyWithin(t, 20*time.Second, "the replica to serve again", func() bool {
			hc, _ := call(t, "GET", r.URL()+"/healthz", "", "")
			code, _ := call(t, "GET", r.URL()+"/v2/serverless", key, "")
			return hc == 200 && code == 200
		})
	}
}
