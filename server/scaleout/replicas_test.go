package scaleout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
)

// call sends a request with a bearer key and a JSON body ("" = none) and returns the status
// and body.
func call(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const echoEndpoint = `{"name":"echo","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["local"]},"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"max":1}}`

// replicas starts n servers on one fresh database, each with its own data directory.
func replicas(t *testing.T, n int, quota *core.Quota) []*server.Server {
	t.Helper()
	url := pgtest.URL(t)
	out := make([]*server.Server, n)
	for i := range out {
		out[i] = servertest.New(t, server.Config{Store: url, Quota: quota}, server.Options{Tick: time.Hour, LeaseTTL: leaseTTL})
	}
	return out
}

// leaseTTL is the replicas' lease: short, so that a lost leader is replaced soon.
const leaseTTL = time.Second

// leader waits for one of rs to lead and returns its index; it fails the test if two lead.
func leader(t *testing.T, rs []*server.Server) int {
	t.Helper()
	who := -1
	testkit.Eventually(t, "a replica to lead", func() bool {
		who = -1
		for i, r := range rs {
			if r.Leading() {
				if who >= 0 {
					t.Fatalf("replicas %d and %d lead at once", who, i)
				}
				who = i
			}
		}
		return who >= 0
	})
	return who
}

// TestReplicasShareState: a key made on one replica authenticates on the others; an endpoint
// created through one is read, listed and run through another (jobs too are shared: the
// leader's workers run the jobs any replica accepts); a key revoked through one is refused by
// all at once.
func TestReplicasShareState(t *testing.T) {
	t.Parallel()
	rs := replicas(t, 2, nil)
	l := leader(t, rs)
	a, b := rs[1-l], rs[l] // A follows, B leads
	key := servertest.Key(t, a, "alice", core.ScopeAll)

	code, body := call(t, "POST", a.URL()+"/v2/serverless", key, echoEndpoint)
	if code != 201 {
		t.Fatalf("create endpoint on replica A = %d %s; want 201", code, body)
	}
	var ep struct{ ID string }
	if err := json.Unmarshal([]byte(body), &ep); err != nil {
		t.Fatal(err)
	}
	if code, body := call(t, "GET", b.URL()+"/v2/serverless/"+ep.ID, key, ""); code != 200 || !strings.Contains(body, `"id":"`+ep.ID+`"`) {
		t.Fatalf("GET the endpoint on replica B = %d %s; want 200 with it", code, body)
	}
	if code, body := call(t, "GET", b.URL()+"/v2/serverless", key, ""); code != 200 || !strings.Contains(body, ep.ID) {
		t.Errorf("list endpoints on replica B = %d %s; want 200 listing %s", code, body, ep.ID)
	}
	// The job is submitted to the follower, run by a worker the leader started, and the
	// follower's runsync is woken when it ends; its status reads alike on both.
	code, body = call(t, "POST", a.URL()+"/v2/"+ep.ID+"/runsync", key, `{"input":{"hello":1}}`)
	if code != 200 || !strings.Contains(body, `"status":"COMPLETED"`) || !strings.Contains(body, `"output":{"hello":1}`) {
		t.Fatalf("runsync on follower A = %d %s; want 200 COMPLETED with the input echoed", code, body)
	}
	var job struct{ ID string }
	if err := json.Unmarshal([]byte(body), &job); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*server.Server{a, b} {
		if code, body := call(t, "GET", r.URL()+"/v2/"+ep.ID+"/status/"+job.ID, key, ""); code != 200 || !strings.Contains(body, `"status":"COMPLETED"`) {
			t.Errorf("status of %s on %s = %d %s; want 200 COMPLETED", job.ID, r.URL(), code, body)
		}
	}
	// An async job submitted to the leader is read on the follower.
	code, body = call(t, "POST", b.URL()+"/v2/"+ep.ID+"/run", key, `{"input":{"n":2}}`)
	if code != 200 {
		t.Fatalf("run on leader B = %d %s; want 200", code, body)
	}
	if err := json.Unmarshal([]byte(body), &job); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the job to complete, seen from the follower", func() bool {
		_, body := call(t, "GET", a.URL()+"/v2/"+ep.ID+"/status/"+job.ID, key, "")
		return strings.Contains(body, `"status":"COMPLETED"`)
	})

	// Revoked through A's store (as `gantry keys revoke --store` does), refused by B as soon as
	// its key cache hears of it (a notification: well within the cache's 10 s bound).
	keys, err := a.Keys().(interface {
		ListKeys(context.Context, string) ([]core.Key, error)
	}).ListKeys(context.Background(), "alice")
	if err != nil || len(keys) != 1 {
		t.Fatalf("ListKeys(alice) = %v, %v; want one key", keys, err)
	}
	if _, err := a.Keys().(interface {
		DeleteKey(context.Context, string, string) (core.Key, error)
	}).DeleteKey(context.Background(), "alice", keys[0].ID); err != nil {
		t.Fatalf("DeleteKey = %v", err)
	}
	testkit.EventuallyWithin(t, 3*time.Second, "replica B to refuse the revoked key", func() bool {
		code, _ := call(t, "GET", b.URL()+"/v2/serverless/"+ep.ID, key, "")
		return code == 401
	})
}

// TestRateLimitAcrossReplicas: a user's quota is one quota, however requests spread.
func TestRateLimitAcrossReplicas(t *testing.T) {
	t.Parallel()
	rs := replicas(t, 3, &core.Quota{Minute: 4})
	// A minute boundary between the requests opens a new window: then try again, as another
	// user.
	for attempt := range 3 {
		key := servertest.Key(t, rs[0], fmt.Sprintf("user%d", attempt), core.ScopeAll)
		minute := time.Now().Unix() / 60
		allowed := 0
		for i := range 9 {
			code, body := call(t, "GET", rs[i%3].URL()+"/v2/serverless", key, "")
			switch code {
			case 200:
				allowed++
			case 429:
			default:
				t.Fatalf("request %d on replica %d = %d %s; want 200 or 429", i+1, i%3, code, body)
			}
		}
		if time.Now().Unix()/60 != minute {
			continue
		}
		if allowed != 4 {
			t.Errorf("9 requests over 3 replicas with a quota of 4 a minute: %d allowed; want 4", allowed)
		}
		return
	}
	t.Fatal("three attempts each crossed a minute boundary")
}

// TestLeaderHandover: of three replicas exactly one leads, and says so on /metrics; when it
// stops, another leads within two lease periods, and only one.
func TestLeaderHandover(t *testing.T) {
	t.Parallel()
	rs := replicas(t, 3, nil)
	first := leader(t, rs)
	for i, r := range rs {
		want := "gantry_leader 0"
		if i == first {
			want = "gantry_leader 1"
		}
		if code, body := call(t, "GET", r.URL()+"/metrics", "", ""); code != 200 || !strings.Contains(body, want) {
			t.Errorf("replica %d /metrics = %d, want 200 with %q", i, code, want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := rs[first].Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown of the leader = %v", err)
	}
	rs[first].Close()
	stopped := time.Now()
	rest := append(append([]*server.Server(nil), rs[:first]...), rs[first+1:]...)
	leader(t, rest)
	if took := time.Since(stopped); took > 2*leaseTTL+leaseTTL/2 {
		t.Errorf("a new leader after %v; want within two lease periods (%v)", took, 2*leaseTTL)
	}
}
