package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	elect "github.com/gantryhq/gantry/leader" // the package; "leader" names a replica here
)

// TestFailover runs three `gantry serve` replicas on one PostgreSQL with echo workers and a
// burst of /run spread over them, and kills one with SIGKILL mid-burst: the leader, and in a
// separate run a follower. Every acknowledged job completes, once (one COMPLETED record each);
// a new leader takes over within two lease periods; runsync clients on the survivors get their
// results.
func TestFailover(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	for _, victim := range []string{"leader", "follower"} {
		t.Run("kill the "+victim, func(t *testing.T) { failover(t, bin, victim == "leader") })
	}
}

func failover(t *testing.T, bin string, killLeader bool) {
	url := pgtest.URL(t)
	var rs []*started
	for range 3 {
		s, _ := startLogged(t, bin, "--store", url, "--data", t.TempDir(), "--quota-minute", "0", "--quota-hour", "0", "--quota-day", "0")
		rs = append(rs, s)
	}
	out, err := execOutput(bin, "keys", "create", "--store", url, "--user", "alice")
	if err != nil {
		t.Fatalf("keys create --store: %v", err)
	}
	key := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
	code, body := call(t, "POST", rs[0].base+"/v2/serverless", key,
		`{"name":"echo","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["local"]},"workers":{"min":0,"max":3},"scaling":{"type":"QUEUE_DELAY","queueDelay":1}}`)
	if code != 201 {
		t.Fatalf("create endpoint = %d %s", code, body)
	}
	var ep struct{ ID string }
	_ = json.Unmarshal([]byte(body), &ep)

	leaderOf := func(among []*started) int {
		for i, s := range among {
			if _, b := call(t, "GET", s.base+"/metrics", "", ""); strings.Contains(b, "gantry_leader 1") {
				return i
			}
		}
		return -1
	}
	deadline := time.Now().Add(60 * time.Second)
	leader := leaderOf(rs)
	for ; leader < 0; leader = leaderOf(rs) {
		if time.Now().After(deadline) {
			t.Fatal("no replica leads after 60 s")
		}
		time.Sleep(100 * time.Millisecond) // polling other processes
	}
	victim := leader
	if !killLeader {
		victim = (leader + 1) % 3
	}
	var survivors []*started
	for i, s := range rs {
		if i != victim {
			survivors = append(survivors, s)
		}
	}

	// runsync clients on the survivors, running across the kill.
	var wg sync.WaitGroup
	syncErrs := make(chan error, 4)
	for i := range 4 {
		s := survivors[i%2]
		wg.Go(func() {
			req, _ := http.NewRequest("POST", s.base+"/v2/"+ep.ID+"/runsync?wait=120000", strings.NewReader(fmt.Sprintf(`{"input":{"sync":%d}}`, i)))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				syncErrs <- err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(b), `"status":"COMPLETED"`) {
				// Still running when the wait ended: it must complete all the same.
				var j jobView
				if json.Unmarshal(b, &j) != nil || j.ID == "" {
					syncErrs <- fmt.Errorf("runsync on %s = %d %s", s.base, resp.StatusCode, b)
				}
			}
		})
	}

	sb := &submitter{}
	const burst = 60
	var killedAt time.Time
	for i := range burst {
		if i == burst/2 {
			if err := rs[victim].cmd.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
			<-rs[victim].done
			killedAt = time.Now()
		}
		s := rs[i%3]
		if !killedAt.IsZero() && s == rs[victim] {
			s = survivors[i%2]
		}
		sb.run(s.base+"/v2/"+ep.ID+"/run", "Bearer "+key, fmt.Sprintf(`{"n":%d}`, i))
	}

	if killLeader {
		deadline := time.Now().Add(60 * time.Second)
		for leaderOf(survivors) < 0 {
			if time.Now().After(deadline) {
				t.Fatal("no survivor leads 60 s after the leader was killed")
			}
			time.Sleep(50 * time.Millisecond) // polling other processes
		}
		if took := time.Since(killedAt); took > 2*elect.DefaultLeaseTTL+5*time.Second {
			t.Errorf("a new leader %v after the kill; want within two lease periods (%v)", took, 2*elect.DefaultLeaseTTL)
		}
	}

	acked := sb.ids()
	if len(acked) < burst-5 {
		t.Fatalf("%d of %d /run acknowledged; want nearly all (only calls to the dead replica may fail)", len(acked), burst)
	}
	// Every acknowledged job completes, read from either survivor. Jobs the dead leader's
	// workers held go back to the queue once their heartbeats are silent for
	// core.WorkerLostAfter.
	deadline = time.Now().Add(core.WorkerLostAfter + 90*time.Second)
	pending := acked
	for len(pending) > 0 {
		var still []string
		for i, id := range pending {
			_, b := call(t, "GET", survivors[i%2].base+"/v2/"+ep.ID+"/status/"+id, key, "")
			var j jobView
			if json.Unmarshal([]byte(b), &j) != nil || j.Status != "COMPLETED" {
				if j.Status == "FAILED" || j.Status == "CANCELLED" || j.Status == "TIMED_OUT" {
					t.Fatalf("job %s ended %s: %s", id, j.Status, b)
				}
				still = append(still, id)
			} else if !strings.Contains(string(j.Output), `"n":`) {
				t.Errorf("job %s output %s; want its input echoed", id, j.Output)
			}
		}
		pending = still
		if len(pending) > 0 && time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged jobs not COMPLETED %v after the kill, e.g. %s", len(pending), len(acked), time.Since(killedAt), pending[0])
		}
		if len(pending) > 0 {
			time.Sleep(250 * time.Millisecond) // polling other processes
		}
	}
	wg.Wait()
	close(syncErrs)
	for err := range syncErrs {
		t.Error(err)
	}
	for _, s := range survivors {
		s.stop(t)
	}
}
