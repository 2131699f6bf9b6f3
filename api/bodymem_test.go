package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
)

// TestRunSyncHoldsOneCopy: runsync requests waiting for their jobs hold about one copy of their
// input, not one per layer that read it (the body buffer, the decoder's buffer, the job's
// input), nor one in the store: a runsync job's input stays in memory only while its runsync
// waits (memq's InputKeeper), so the store's memtable holds no second copy. (It did, and how
// much of it was live when the heap was read varied with the memtable's fill: 1.2-1.6x, a
// flaky test; now about 1.03x.) Not parallel: it measures the process's live heap.
func TestRunSyncHoldsOneCopy(t *testing.T) {
	if raceEnabled {
		t.Skip("measures memory: not under -race (see raceEnabled)")
	}
	e := setup(t, setupOpts{quota: core.Quota{}})
	ep := e.create(minimalQueue)
	const n, size = 8, 2 << 20
	body := []byte(`{"input":{"s":"` + strings.Repeat("x", size-20) + `"}}`)
	live := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	base := live()
	defer holdRunSyncs(t, e, ep, n, body, 8)()
	held, bodies := live()-base, int64(n*len(body))
	t.Logf("%d runsync requests hold %d MB for %d MB of bodies (%.2fx)", n, held>>20, bodies>>20, float64(held)/float64(bodies))
	if held > bodies*3/2 {
		t.Errorf("%d runsync requests of %d bytes hold %d MB; want at most 1.5x their %d MB", n, len(body), held>>20, bodies>>20)
	}
}

// TestRunSyncPeakMemory: while 16 concurrent runsync requests of just over 1 MB are read,
// checked, decoded and queued, the server allocates under 3x their bodies in all (the body
// buffer and the rest of the request's handling: about 2.2-2.3x; the store writes no runsync
// input while its runsync waits), so its
// peak memory cannot grow by more: the generated decoder's copies of the body (read again,
// kept raw, input copied out: about 6.5x in all) are not made, and the write batch is not
// rounded up to the next power of two, 2 MB (about 3.4x). The bodies together stay under the
// store's memtable, so no flush adds its own allocations. Not parallel: it measures the
// process's allocations.
func TestRunSyncPeakMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("measures memory: not under -race (see raceEnabled)")
	}
	e := setup(t, setupOpts{quota: core.Quota{}})
	ep := e.create(minimalQueue)
	const n, size = 16, 1<<20 + 16<<10
	body := []byte(`{"input":{"s":"` + strings.Repeat("x", size-20) + `"},"policy":{"ttl":60000}}`)
	allocated := func() int64 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.TotalAlloc)
	}
	// One job first, so what the first request sets up (caches, the store's log) is not counted.
	if r := e.do("POST", "/v2/"+ep+"/run", e.alice, `{"input":{}}`); r.status != 200 {
		t.Fatalf("run = %d %s; want 200", r.status, r.body)
	}
	// No collection while measuring: it would empty the pools the store reuses buffers from,
	// and what they allocate again would vary from run to run.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	base := allocated()
	defer holdRunSyncs(t, e, ep, n, body, 17)()
	got, bodies := allocated()-base, int64(n*len(body))
	t.Logf("allocated %d MB for %d MB of bodies (%.2fx)", got>>20, bodies>>20, float64(got)/float64(bodies))
	if got > bodies*3 {
		t.Errorf("%d runsync requests of %d bytes allocated %d MB; want at most 3x their %d MB", n, len(body), got>>20, bodies>>20)
	}
}

// TestRunSyncPastItsWaitStoresNoCopy: runsync requests whose waits end before their jobs (no
// worker) must store their inputs, and a large input is written to its file from the
// request's buffer: the requests allocate under 2x their bodies in all (about 1.03x). Through
// Pebble's batch, memtable and log they allocated about 3.6x. Not parallel: it measures the
// process's allocations.
func TestRunSyncPastItsWaitStoresNoCopy(t *testing.T) {
	if raceEnabled {
		t.Skip("measures memory: not under -race (see raceEnabled)")
	}
	e := setup(t, setupOpts{quota: core.Quota{}})
	ep := e.create(minimalQueue)
	const n, size = 8, 2 << 20
	body := []byte(`{"input":{"s":"` + strings.Repeat("x", size-20) + `"}}`)
	if r := e.do("POST", "/v2/"+ep+"/run", e.alice, `{"input":{}}`); r.status != 200 {
		t.Fatalf("run = %d %s; want 200", r.status, r.body)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	statuses := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", e.srv.URL+"/v2/"+ep+"/runsync?wait=1000", bytes.NewReader(body))
			req.Header.Set("Authorization", e.alice)
			req.Header.Set("Content-Type", "application/json")
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				statuses[i] = err.Error()
				return
			}
			defer resp.Body.Close()
			var v struct{ Status string }
			_ = json.NewDecoder(resp.Body).Decode(&v)
			statuses[i] = fmt.Sprint(resp.StatusCode, " ", v.Status)
		}()
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	for i, st := range statuses {
		if st != "200 IN_QUEUE" {
			t.Fatalf("runsync %d = %s; want 200 IN_QUEUE (the wait ends first)", i, st)
		}
	}
	got, bodies := int64(after.TotalAlloc-before.TotalAlloc), int64(n*len(body))
	t.Logf("allocated %d MB for %d MB of bodies (%.2fx)", got>>20, bodies>>20, float64(got)/float64(bodies))
	if got > bodies*2 {
		t.Errorf("%d runsync requests of %d bytes, stored past their waits, allocated %d MB; want at most 2x their %d MB", n, len(body), got>>20, bodies>>20)
	}
}

// holdRunSyncs sends n concurrent runsync requests of body to endpoint ep (on an endpoint with
// no workers, so they wait) and returns once the endpoint has inQueue jobs queued; the function
// it returns ends the requests.
func holdRunSyncs(t *testing.T, e *env, ep string, n int, body []byte, inQueue int) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/v2/"+ep+"/runsync?wait=60000", bytes.NewReader(body))
			req.Header.Set("Authorization", e.alice)
			req.Header.Set("Content-Type", "application/json")
			if resp, err := e.srv.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	want := fmt.Sprintf(`"inQueue":%d`, inQueue)
	testkit.Eventually(t, "the jobs to be queued", func() bool {
		return strings.Contains(e.do("GET", "/v2/"+ep+"/health", e.alice, "").body, want)
	})
	return func() { cancel(); wg.Wait() }
}
