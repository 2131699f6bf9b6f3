package server_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
)

const echoEndpoint = `{"name":"echo","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["local"]},"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"max":1}}`

// TestServerServesJobsAndKeepsState builds the whole server from a config: the API, /metrics
// and /healthz answer; a job on an endpoint scaled to zero runs at once (the job engine wakes
// the scheduler, with no tick for an hour); and after a graceful stop a server on the same
// data directory finds the endpoint.
func TestServerServesJobsAndKeepsState(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	s := servertest.New(t, server.Config{Data: data}, server.Options{Tick: time.Hour})
	key := servertest.Key(t, s, "alice", core.ScopeAll)
	if code, body := servertest.Call(t, "GET", s.URL()+"/healthz", "", ""); code != 200 {
		t.Fatalf("/healthz = %d %s; want 200", code, body)
	}
	code, body := servertest.Call(t, "POST", s.URL()+"/v2/serverless", key, echoEndpoint)
	if code != 201 {
		t.Fatalf("create endpoint = %d %s; want 201", code, body)
	}
	var ep struct{ ID string }
	if err := json.Unmarshal([]byte(body), &ep); err != nil {
		t.Fatal(err)
	}
	code, body = servertest.Call(t, "POST", s.URL()+"/v2/"+ep.ID+"/runsync", key, `{"input":{"hello":1}}`)
	if code != 200 || !strings.Contains(body, `"status":"COMPLETED"`) || !strings.Contains(body, `"output":{"hello":1}`) {
		t.Fatalf("runsync = %d %s; want 200 COMPLETED with the input echoed", code, body)
	}
	if code, body := servertest.Call(t, "GET", s.URL()+"/metrics", "", ""); code != 200 || !strings.Contains(body, `gantry_queue_jobs{endpoint="`+ep.ID+`"`) {
		t.Errorf("/metrics = %d %s; want 200 with the endpoint's queue", code, body)
	}
	if code, _ := servertest.Call(t, "DELETE", s.URL()+"/metrics", "", ""); code != 405 {
		t.Errorf("DELETE /metrics = %d; want 405", code)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if resp, err := http.Get(s.URL() + "/healthz"); err == nil {
		resp.Body.Close()
		t.Errorf("/healthz after Shutdown = %d; want no answer (the listener closed)", resp.StatusCode)
	}
	s.Close()

	again := servertest.New(t, server.Config{Data: data}, server.Options{})
	if code, body := servertest.Call(t, "GET", again.URL()+"/v2/serverless/"+ep.ID, key, ""); code != 200 || !strings.Contains(body, `"id":"`+ep.ID+`"`) {
		t.Errorf("the endpoint after a restart = %d %s; want 200 with it", code, body)
	}
}

// TestNewRefusesAndReleases: a config New refuses opens nothing, and a New that fails after
// opening the stores releases them, so that the next New on the same data directory succeeds.
func TestNewRefusesAndReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := []pool.Pool{servertest.LocalPool(2)}
	_, err := server.New(ctx, server.Config{Data: t.TempDir(), Limits: server.LimitsConfig{BodyBudgetMB: 1}}, server.Options{Pools: pools})
	if err == nil || !strings.Contains(err.Error(), "limits.bodyBudgetMB 1 must be at least") {
		t.Errorf("New with a 1 MiB body budget = %v; want a refusal naming limits.bodyBudgetMB", err)
	}

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	data := t.TempDir()
	if _, err := server.New(ctx, server.Config{Data: data, Listen: busy.Addr().String()}, server.Options{Pools: pools}); err == nil {
		t.Fatalf("New on an address in use succeeded; want an error")
	}
	s := servertest.New(t, server.Config{Data: data}, server.Options{Pools: pools})
	if code, body := servertest.Call(t, "GET", s.URL()+"/healthz", "", ""); code != 200 {
		t.Errorf("/healthz of a server on the data directory a failed New opened = %d %s; want 200", code, body)
	}
}

// everyInterface is a loopback listener that reports the unspecified address, as a server
// listening on 0.0.0.0 (or [::]) does; it still listens on 127.0.0.1 only.
type everyInterface struct {
	net.Listener
	ip net.IP
}

func (l everyInterface) Addr() net.Addr {
	a := *l.Listener.Addr().(*net.TCPAddr)
	a.IP = l.ip
	return &a
}

// TestPublicURLOnEveryInterface: a server listening on every interface has no address to hand
// out, so it refuses to start without publicUrl, saying to set it; with one it hands that out
// (issue 29, item 17). On one host, the default is that host.
func TestPublicURLOnEveryInterface(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := []pool.Pool{servertest.LocalPool(2)}
	for _, ip := range []net.IP{net.IPv4zero, net.IPv6unspecified} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		any := everyInterface{ln, ip}
		_, err = server.New(ctx, server.Config{Data: t.TempDir()}, server.Options{Pools: pools, Listener: any})
		if err == nil || !strings.Contains(err.Error(), "publicUrl is required when listening on every interface ("+any.Addr().String()+")") ||
			!strings.Contains(err.Error(), "--public-url") {
			t.Errorf("New on %s without publicUrl = %v; want a refusal saying to set publicUrl", any.Addr(), err)
		}
		ln.Close()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := servertest.New(t, server.Config{PublicURL: "https://gantry.example/"}, server.Options{Pools: pools, Listener: everyInterface{ln, net.IPv4zero}})
	if got := s.Config().PublicURL; got != "https://gantry.example" {
		t.Errorf("publicUrl on 0.0.0.0 with one given = %q; want https://gantry.example", got)
	}
	one := servertest.New(t, server.Config{}, server.Options{Pools: pools})
	if got := one.Config().PublicURL; got != one.URL() {
		t.Errorf("default publicUrl on one host = %q; want %q", got, one.URL())
	}
}
