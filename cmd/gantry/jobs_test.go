package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gantryUser starts a server and returns it with a fresh key and a queue endpoint on the echo
// worker.
func gantryUser(t *testing.T, bin, data string, endpoint string) (*started, string, string) {
	t.Helper()
	s := startServe(t, bin, "--data", data, "--quota-minute", "0", "--quota-hour", "0", "--quota-day", "0",
		"--webhook-allow-private") // the tests' webhook receivers listen on 127.0.0.1
	out, err := exec.Command(bin, "keys", "create", "--data", data, "--user", "alice").Output()
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(out)[strings.LastIndex(strings.TrimSpace(string(out)), "\n")+1:])
	code, body := call(t, "POST", s.base+"/v2/serverless", key, endpoint)
	if code != 201 {
		t.Fatalf("create endpoint = %d %s", code, body)
	}
	var ep struct{ ID string }
	_ = json.Unmarshal([]byte(body), &ep)
	return s, key, ep.ID
}

const echoEndpoint = `{"name":"echo","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["local"]},"scaling":{"type":"QUEUE_DELAY","queueDelay":4}}`

type jobView struct {
	ID            string          `json:"id"`
	Status        string          `json:"status"`
	Output        json.RawMessage `json:"output"`
	Error         string          `json:"error"`
	Retries       int             `json:"retries"`
	DelayTime     *int64          `json:"delayTime"`
	ExecutionTime *int64          `json:"executionTime"`
	Stream        []struct {
		Output json.RawMessage `json:"output"`
	} `json:"stream"`
}

// jobCall sends a job request with the bare key, as RunPod's examples do.
func jobCall(t *testing.T, method, url, key, body string) (int, jobView) {
	t.Helper()
	code, _, b := send(t, method, url, key, body)
	var v jobView
	_ = json.Unmarshal(b, &v)
	return code, v
}

// waitStatus polls status until the job reaches want or the deadline passes.
func waitStatus(t *testing.T, url, key, want string) jobView {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, v := jobCall(t, "GET", url, key, "")
		if code == 200 && v.Status == want {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: status %d %+v; want %s", url, code, v, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestJobsEndToEnd drives every job operation against `gantry serve` and real echo worker
// processes started by the process pool.
func TestJobsEndToEnd(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	s, key, ep := gantryUser(t, bin, t.TempDir(), echoEndpoint)
	v2 := s.base + "/v2/" + ep

	code, j := jobCall(t, "POST", v2+"/runsync", key, `{"input":{"echo":{"hello":"world"}}}`)
	if code != 200 || j.Status != "COMPLETED" || string(j.Output) != `{"hello":"world"}` || !strings.HasPrefix(j.ID, "sync-") ||
		j.DelayTime == nil || j.ExecutionTime == nil {
		t.Fatalf("runsync = %d %+v", code, j)
	}
	code, j = jobCall(t, "POST", v2+"/runsync", key, `{"input":{"error":"boom"}}`)
	if code != 200 || j.Status != "FAILED" || j.Error != "boom" {
		t.Fatalf("failing runsync = %d %+v", code, j)
	}
	code, j = jobCall(t, "POST", v2+"/runsync?wait=1000", key, `{"input":{"sleep_ms":10000}}`)
	if code != 200 || (j.Status != "IN_QUEUE" && j.Status != "IN_PROGRESS") {
		t.Fatalf("runsync past its wait = %d %+v; want the current status", code, j)
	}
	slow := j.ID

	// cancel a running job; a second cancel is 409; retry of a cancelled job is 409.
	waitStatus(t, v2+"/status/"+slow, key, "IN_PROGRESS")
	if code, j := jobCall(t, "POST", v2+"/cancel/"+slow, key, ""); code != 200 || j.Status != "CANCELLED" {
		t.Errorf("cancel = %d %+v", code, j)
	}
	if code, _ := jobCall(t, "POST", v2+"/cancel/"+slow, key, ""); code != 409 {
		t.Errorf("second cancel = %d; want 409", code)
	}
	if code, _ := jobCall(t, "POST", v2+"/retry/"+slow, key, ""); code != 409 {
		t.Errorf("retry of a cancelled job = %d; want 409", code)
	}
	// The worker was told to stop: it takes the next job at once instead of sleeping on.
	start := time.Now()
	if code, j := jobCall(t, "POST", v2+"/runsync", key, `{"input":{"echo":1}}`); code != 200 || j.Status != "COMPLETED" {
		t.Errorf("runsync after a cancel = %d %+v", code, j)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a job after a cancelled 10 s job took %v; the cancel did not stop the 10 s handler", d)
	}

	// run, stream (each chunk handed out once), status.
	code, j = jobCall(t, "POST", v2+"/run", key, `{"input":{"stream":["a","b","c"],"sleep_ms":200}}`)
	if code != 200 || j.Status != "IN_QUEUE" {
		t.Fatalf("run = %d %+v", code, j)
	}
	streamed := ""
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, st := jobCall(t, "GET", v2+"/stream/"+j.ID, key, "")
		for _, c := range st.Stream {
			streamed += string(c.Output)
		}
		if st.Status == "COMPLETED" && len(st.Stream) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if streamed != `"a""b""c"` {
		t.Errorf("streamed %s; want \"a\" \"b\" \"c\" once each", streamed)
	}
	if v := waitStatus(t, v2+"/status/"+j.ID, key, "COMPLETED"); string(v.Output) != `["a","b","c"]` {
		t.Errorf("stream job output = %s", v.Output)
	}

	// retry a failed job: same id, original input.
	_, j = jobCall(t, "POST", v2+"/run", key, `{"input":{"error":"once","echo":7}}`)
	failed := waitStatus(t, v2+"/status/"+j.ID, key, "FAILED")
	if code, r := jobCall(t, "POST", v2+"/retry/"+failed.ID, key, ""); code != 200 || r.Status != "IN_QUEUE" || r.ID != failed.ID {
		t.Errorf("retry = %d %+v", code, r)
	}
	if v := waitStatus(t, v2+"/status/"+failed.ID, key, "FAILED"); v.Retries != 1 {
		t.Errorf("retried job retries = %d; want 1", v.Retries)
	}

	// purge-queue removes queued jobs only.
	_, blocker := jobCall(t, "POST", v2+"/run", key, `{"input":{"sleep_ms":1500}}`)
	waitStatus(t, v2+"/status/"+blocker.ID, key, "IN_PROGRESS")
	for i := range 3 {
		jobCall(t, "POST", v2+"/run", key, fmt.Sprintf(`{"input":{"echo":%d}}`, i))
	}
	var purge struct{ Removed int }
	_, _, resp := send(t, "POST", s.base+"/v2/"+ep+"/purge-queue", key, "")
	_ = json.Unmarshal(resp, &purge)
	if purge.Removed != 3 {
		t.Errorf("purge removed %d; want 3", purge.Removed)
	}
	waitStatus(t, v2+"/status/"+blocker.ID, key, "COMPLETED")

	var health struct {
		Jobs    map[string]int
		Workers map[string]int
	}
	_, _, hb := send(t, "GET", v2+"/health", key, "")
	_ = json.Unmarshal(hb, &health)
	if health.Jobs["completed"] < 4 || health.Jobs["failed"] < 2 || health.Jobs["retried"] != 1 || health.Jobs["inQueue"] != 0 ||
		health.Workers["idle"]+health.Workers["running"] < 1 {
		t.Errorf("health = %s", hb)
	}
	if code, _ := jobCall(t, "GET", v2+"/status/nope", key, ""); code != 404 {
		t.Errorf("unknown job = %d; want 404", code)
	}
	s.stop(t)
}

// TestCrashLosesNoAcknowledgedJob submits a burst, kills the server with SIGKILL in the middle,
// restarts it, and checks that every job whose /run was answered is there and completes, and
// that no job completes twice. Webhooks are delivered at least once (a delivery the crash
// interrupted is made again), so a job completed twice shows as two different webhook bodies
// (another worker, other times), not as two deliveries of the same one.
func TestCrashLosesNoAcknowledgedJob(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	data := t.TempDir()

	var hooksMu sync.Mutex
	hooks := map[string]map[string]bool{} // job id -> the distinct COMPLETED bodies delivered
	deliveries := 0
	hookSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body struct{ ID, Status string }
		_ = json.Unmarshal(raw, &body)
		if body.Status == "COMPLETED" {
			hooksMu.Lock()
			if hooks[body.ID] == nil {
				hooks[body.ID] = map[string]bool{}
			}
			hooks[body.ID][string(raw)] = true
			deliveries++
			hooksMu.Unlock()
		}
	}))
	defer hookSrv.Close()

	s, key, ep := gantryUser(t, bin, data, echoEndpoint)
	var acked sync.Map // id -> echo value
	var nAcked atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 5 * time.Second}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := w*100000 + i
				body := fmt.Sprintf(`{"input":{"echo":%d,"sleep_ms":2},"webhook":%q}`, n, hookSrv.URL)
				req, _ := http.NewRequest("POST", s.base+"/v2/"+ep+"/run", strings.NewReader(body))
				req.Header.Set("Authorization", key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					return // the server is gone
				}
				var j jobView
				_ = json.NewDecoder(resp.Body).Decode(&j)
				resp.Body.Close()
				if resp.StatusCode == 200 && j.ID != "" {
					acked.Store(j.ID, n)
					nAcked.Add(1)
				}
			}
		}()
	}
	for nAcked.Load() < 400 {
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.cmd.Process.Kill(); err != nil { // SIGKILL mid-burst
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	<-s.done

	s2 := startServe(t, bin, "--data", data, "--quota-minute", "0", "--quota-hour", "0", "--quota-day", "0", "--webhook-allow-private")
	total := 0
	acked.Range(func(k, v any) bool {
		total++
		id, n := k.(string), v.(int)
		j := waitStatus(t, s2.base+"/v2/"+ep+"/status/"+id, key, "COMPLETED")
		if string(j.Output) != fmt.Sprint(n) {
			t.Errorf("job %s output %s; want %d", id, j.Output, n)
		}
		return true
	})
	t.Logf("%d acknowledged jobs before SIGKILL, all present and completed after restart", total)
	// Every acknowledged job's webhook arrives (after the restart at the latest), and no job
	// completed twice.
	for id := range acked.Range {
		deadline := time.Now().Add(30 * time.Second)
		for {
			hooksMu.Lock()
			n := len(hooks[id.(string)])
			hooksMu.Unlock()
			if n > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	hooksMu.Lock()
	for id := range acked.Range {
		if len(hooks[id.(string)]) == 0 {
			t.Errorf("job %s: no webhook", id)
		}
	}
	for id, bodies := range hooks {
		if len(bodies) > 1 {
			t.Errorf("job %s completed %d times: %v", id, len(bodies), bodies)
		}
	}
	t.Logf("%d webhook deliveries for %d completed jobs (deliveries the crash interrupted are made again)", deliveries, len(hooks))
	hooksMu.Unlock()
	s2.stop(t)
}
