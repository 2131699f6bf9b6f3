package scaleout_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
	"github.com/gantryhq/gantry/worker/httpecho"
)

// lbReplicas starts two replicas on one fresh database, serving on lns, with peerURL ("" =
// the default); they tick often, and a LOAD_BALANCER request waits at most 10 s for a worker.
func lbReplicas(t *testing.T, lns []net.Listener, peerURL string) []*server.Server {
	t.Helper()
	url := pgtest.URL(t)
	rs := make([]*server.Server, len(lns))
	for i, ln := range lns {
		cfg := server.Config{Store: url, PeerURL: peerURL}
		cfg.Autoscaler.LBHold = 10
		rs[i] = servertest.New(t, cfg, server.Options{Tick: 100 * time.Millisecond, LeaseTTL: leaseTTL, Listener: ln})
	}
	return rs
}

// loopbackListeners opens n listeners on 127.0.0.1.
func loopbackListeners(t *testing.T, n int) []net.Listener {
	t.Helper()
	lns := make([]net.Listener, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
	}
	return lns
}

// createLB creates a gantry-http-echo LOAD_BALANCER endpoint of at most one worker, retired
// after 1 s idle, through the server at base, and returns its id.
func createLB(t *testing.T, base, key string) string {
	t.Helper()
	code, body := call(t, "POST", base+"/v2/serverless", key, `{"name":"web","type":"LOAD_BALANCER","templateId":"gantry-http-echo",
		"gpu":{"pools":["local"]},"workers":{"min":0,"max":1,"idleTimeout":1},"scaling":{"type":"REQUEST_COUNT","requestCount":4}}`)
	if code != 201 {
		t.Fatalf("create LOAD_BALANCER endpoint = %d %s; want 201", code, body)
	}
	var ep struct{ ID string }
	if err := json.Unmarshal([]byte(body), &ep); err != nil {
		t.Fatal(err)
	}
	return ep.ID
}

// lbSend sends a request with an Authorization header value ("" = none), extra headers and a
// body, and returns the answer with its body read.
func lbSend(t *testing.T, method, url, authz, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, url, err)
	}
	return resp, string(b)
}

// TestLoadBalancerThroughFollower: a LOAD_BALANCER request sent to the replica that does not
// lead reaches the leader's worker and comes back as the worker answered it (status, headers,
// body, a streamed body, an upload of unknown length, a WebSocket), the worker getting neither the key nor the replicas' mark; the
// leader's balancer counts a request forwarded to it as in flight (its worker is busy, not
// retired past its idle timeout, while it runs); bad keys are refused by the follower itself;
// a request another replica forwarded to one that does not lead is refused, not forwarded
// again.
func TestLoadBalancerThroughFollower(t *testing.T) {
	t.Parallel()
	rs := lbReplicas(t, loopbackListeners(t, 2), "")
	l := leader(t, rs)
	ld, fl := rs[l], rs[1-l]
	if got := ld.Config().PeerURL; got != ld.URL() {
		t.Errorf("the leader's default peerUrl = %q; want its listen address %q", got, ld.URL())
	}
	key := servertest.Key(t, fl, "alice", core.ScopeAll)
	id := createLB(t, fl.URL(), key)
	base := fl.URL() + api.LBPrefix + id

	// Scale from zero, through the follower: the leader starts the worker and answers. Until
	// the follower has seen the leader's lease the answer is a 503 that says to retry shortly;
	// the leader reads the endpoint made on the follower if its NOTIFY has not arrived yet.
	var resp *http.Response
	var body string
	testkit.Eventually(t, "the follower to know the leader, and the leader the endpoint", func() bool {
		resp, body = lbSend(t, "POST", base+"/hello/world?x=1", "Bearer "+key, `{"a":1}`, map[string]string{"X-Custom": "v"})
		return !(resp.StatusCode == 503 && strings.Contains(body, "no replica leads yet"))
	})
	var echo struct {
		Worker, Method, Path, Query, Body string
		Headers                           map[string][]string
	}
	if err := json.Unmarshal([]byte(body), &echo); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST through the follower = %d %s; want 200 from the worker", resp.StatusCode, body)
	}
	if echo.Method != "POST" || echo.Path != "/hello/world" || echo.Query != "x=1" || echo.Body != `{"a":1}` {
		t.Errorf("the worker got %s %s?%s %q; want POST /hello/world?x=1 {\"a\":1}", echo.Method, echo.Path, echo.Query, echo.Body)
	}
	if resp.Header.Get("X-Worker-Id") != echo.Worker || echo.Worker == "" {
		t.Errorf("X-Worker-Id = %q; want the worker's own header back (%q)", resp.Header.Get("X-Worker-Id"), echo.Worker)
	}
	for _, h := range []string{"Authorization", api.ForwardedHeader} {
		if _, leaked := echo.Headers[h]; leaked {
			t.Errorf("the worker got %s: %v; want it kept between Gantry's replicas", h, echo.Headers[h])
		}
	}
	if got := echo.Headers["X-Custom"]; len(got) != 1 || got[0] != "v" {
		t.Errorf("the worker got X-Custom %v; want [v]", got)
	}

	// The worker's own status and body, as is.
	if resp, body := lbSend(t, "GET", base+"/status/418", key, "", nil); resp.StatusCode != 418 || !strings.Contains(body, "status 418 from the worker") {
		t.Errorf("GET /status/418 through the follower = %d %q; want the worker's 418", resp.StatusCode, body)
	}
	// A body the worker streams in flushed chunks, whole.
	if resp, body := lbSend(t, "GET", base+"/stream?bytes=300000", key, "", nil); resp.StatusCode != 200 || len(body) != 300000 || !strings.HasPrefix(body, "abcdefghijklmnopqrstuvwxyzabc") {
		t.Errorf("GET /stream through the follower = %d, %d bytes; want 200 with 300000", resp.StatusCode, len(body))
	}

	// An upload of unknown length streams through both replicas (chunked all the way).
	up, _ := http.NewRequest("PUT", base+"/up", io.NopCloser(strings.NewReader(strings.Repeat("u", 100000))))
	up.Header.Set("Authorization", "Bearer "+key)
	if resp, err := http.DefaultClient.Do(up); err != nil {
		t.Errorf("a chunked upload through the follower: %v", err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		echo.Body, echo.Headers = "", nil
		_ = json.Unmarshal(b, &echo)
		if _, leaked := echo.Headers[api.ForwardedHeader]; resp.StatusCode != 200 || echo.Body != strings.Repeat("u", 100000) || leaked {
			t.Errorf("a chunked upload through the follower = %d, %d bytes echoed (the mark leaked: %v); want 200 with all 100000", resp.StatusCode, len(echo.Body), leaked)
		}
	}

	// A WebSocket through both replicas.
	conn, err := net.Dial("tcp", strings.TrimPrefix(fl.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rw := bufio.NewReadWriter(bufio.NewReader(conn), bufio.NewWriter(conn))
	fmt.Fprintf(rw, "GET %s%s/ws HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", api.LBPrefix, id, key)
	rw.Flush()
	if resp, err := http.ReadResponse(rw.Reader, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Errorf("WebSocket upgrade through the follower = %v, %v; want 101", resp, err)
	} else {
		httpecho.WriteFrame(rw, true, 0x1, []byte("hello over ws"), []byte{1, 2, 3, 4})
		rw.Flush()
		if _, op, msg, err := httpecho.ReadFrame(rw.Reader); err != nil || op != 0x1 || string(msg) != "hello over ws" {
			t.Errorf("WebSocket echo through the follower = %d %q, %v; want the text frame back", op, msg, err)
		}
	}
	conn.Close()

	// A slow request through the follower is in flight on the leader's balancer: the leader's
	// /health shows its worker running; past the 1 s idle timeout it is not retired, and the
	// request completes.
	slow := make(chan string, 1)
	go func() {
		resp, err := http.DefaultClient.Do(func() *http.Request {
			req, _ := http.NewRequest("GET", base+"/sleep?ms=2500", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			return req
		}())
		if err != nil {
			slow <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		slow <- resp.Status + " " + string(b)
	}()
	testkit.Eventually(t, "the leader to count the forwarded request in flight", func() bool {
		return health(t, ld, key, id)["running"] == float64(1)
	})
	if got := <-slow; !strings.HasPrefix(got, "200 ") || !strings.Contains(got, `"slept_ms":2500`) {
		t.Errorf("a 2.5 s request through the follower, with a 1 s idle timeout = %s; want 200 from the worker", got)
	}

	// Bad keys: refused (401) with no forwarding needed.
	if resp, body := lbSend(t, "GET", base+"/x", "Bearer nope", "", nil); resp.StatusCode != 401 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("a bad key on the follower = %d %s; want 401 problem+json", resp.StatusCode, body)
	}
	// A request marked as forwarded reaches a replica that does not lead: 503, not forwarded again.
	resp, body = lbSend(t, "GET", base+"/x", "Bearer "+key, "", map[string]string{api.ForwardedHeader: "1"})
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "does not lead") {
		t.Errorf("a forwarded request on the follower = %d (Retry-After %q) %s; want 503 with Retry-After, saying it does not lead",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

// anyAddr is a loopback listener that reports the unspecified address, as a replica listening
// on 0.0.0.0 does (it still listens on 127.0.0.1 only).
type anyAddr struct{ net.Listener }

func (l anyAddr) Addr() net.Addr {
	a := *l.Listener.Addr().(*net.TCPAddr)
	a.IP = net.IPv4zero
	return &a
}

// TestLoadBalancerFollowerWithoutPeerURL: replicas listening on every interface derive no
// peerUrl; a LOAD_BALANCER request on the follower is answered 503 problem+json that names
// the setting to fix (after its key is checked).
func TestLoadBalancerFollowerWithoutPeerURL(t *testing.T) {
	t.Parallel()
	lns := loopbackListeners(t, 2)
	urls := []string{"http://" + lns[0].Addr().String(), "http://" + lns[1].Addr().String()}
	rs := make([]*server.Server, 2)
	store := pgtest.URL(t)
	for i, ln := range lns { // on every interface, publicUrl is required
		cfg := server.Config{Store: store, PublicURL: urls[i]}
		cfg.Autoscaler.LBHold = 10
		rs[i] = servertest.New(t, cfg, server.Options{Tick: 100 * time.Millisecond, LeaseTTL: leaseTTL, Listener: anyAddr{ln}})
	}
	l := leader(t, rs)
	if got := rs[l].Config().PeerURL; got != "" {
		t.Fatalf("peerUrl of a replica on 0.0.0.0 = %q; want none", got)
	}
	fl := urls[1-l]
	key := servertest.Key(t, rs[0], "alice", core.ScopeAll)
	id := createLB(t, fl, key)
	if resp, _ := lbSend(t, "GET", fl+api.LBPrefix+id+"/x", "", "", nil); resp.StatusCode != 401 {
		t.Errorf("no key on the follower = %d; want 401", resp.StatusCode)
	}
	var resp *http.Response
	var body string
	testkit.Eventually(t, "the follower to know the leader", func() bool {
		resp, body = lbSend(t, "GET", fl+api.LBPrefix+id+"/x", "Bearer "+key, "", nil)
		return !strings.Contains(body, "no replica leads yet")
	})
	if resp.StatusCode != 503 || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, "set peerUrl") {
		t.Errorf("GET through the follower without a peerUrl = %d %s %s; want 503 problem+json saying to set peerUrl",
			resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}

// TestLoadBalancerLeaderUnreachable: a follower that cannot reach the leader's peerUrl answers
// 502 problem+json saying so.
func TestLoadBalancerLeaderUnreachable(t *testing.T) {
	t.Parallel()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + closed.Addr().String() // nothing listens there once closed
	closed.Close()
	rs := lbReplicas(t, loopbackListeners(t, 2), dead)
	fl := rs[1-leader(t, rs)]
	key := servertest.Key(t, fl, "alice", core.ScopeAll)
	id := createLB(t, fl.URL(), key)
	var resp *http.Response
	var body string
	testkit.Eventually(t, "the follower to know the leader", func() bool {
		resp, body = lbSend(t, "GET", fl.URL()+api.LBPrefix+id+"/x", "Bearer "+key, "", nil)
		return !strings.Contains(body, "no replica leads yet")
	})
	if resp.StatusCode != 502 || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, "could not be reached") {
		t.Errorf("GET through the follower with the leader unreachable = %d %s; want 502 problem+json saying so", resp.StatusCode, body)
	}
}
