package api_test

import (
	"bytes"
	"context"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/gantryhq/gantry/core"
)

// TestRunSyncHoldsOneCopy: runsync requests waiting for their jobs hold about one copy of their
// input, not one per layer that read it (the body buffer, the decoder's buffer, the job's
// input). Not parallel: it measures the process's live heap.
func TestRunSyncHoldsOneCopy(t *testing.T) {
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
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
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
	waitFor(t, "the jobs to be queued", func() bool {
		return strings.Contains(e.do("GET", "/v2/"+ep+"/health", e.alice, "").body, `"inQueue":8`)
	})
	held, bodies := live()-base, int64(n*len(body))
	if held > bodies*3/2 {
		t.Errorf("%d runsync requests of %d bytes hold %d MB; want at most 1.5x their %d MB", n, len(body), held>>20, bodies>>20)
	}
}
