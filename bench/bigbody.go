package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// scenarioBigBody measures what large request bodies cost the server's memory: keyless 60 MB
// posts to a worker route (refused from their headers, before the body), then 16 concurrent
// 20 MB runsync requests (held against the body budget; those past it get 503). Their jobs
// outlive the waits (no worker), so every held input is also written to the store.
func (b *bench) scenarioBigBody() error {
	g, err := b.startGantry("bigbody")
	if err != nil {
		return err
	}
	defer g.stop()
	ep, err := g.createEndpoint("bench-bigbody", 0, 0)
	if err != nil {
		return err
	}
	rss0, hwm0, _ := g.memory()

	// 8 keyless 60 MB job-done posts.
	keyless := make([]byte, 60<<20)
	statuses := func(n int, req func() (*http.Request, error)) (map[int]int, time.Duration) {
		var mu sync.Mutex
		got := map[int]int{}
		var wg sync.WaitGroup
		start := time.Now()
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code := 0
				if r, err := req(); err == nil {
					if resp, err := http.DefaultClient.Do(r); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
						code = resp.StatusCode
					}
				}
				mu.Lock()
				got[code]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		return got, time.Since(start)
	}
	kStatus, kTime := statuses(8, func() (*http.Request, error) {
		return http.NewRequest("POST", g.base+"/v2/"+ep+"/job-done/w1/j1", bytes.NewReader(keyless))
	})
	_, hwmKeyless, _ := g.memory()
	logf("bigbody: 8 keyless 60 MB posts: %v in %v; VmHWM %s", kStatus, kTime.Round(time.Millisecond), mib(hwmKeyless))

	// 16 concurrent 20 MB runsync requests, each waiting 5 s for a job no worker takes.
	body := jsonInput(20<<20 - 64)
	sStatus, sTime := statuses(16, func() (*http.Request, error) {
		r, err := http.NewRequest("POST", g.base+"/v2/"+ep+"/runsync?wait=5000", bytes.NewReader(body))
		if err == nil {
			r.Header.Set("Authorization", "Bearer "+g.key)
			r.Header.Set("Content-Type", "application/json")
		}
		return r, err
	})
	rss, hwm, err := g.memory()
	if err != nil {
		return err
	}
	accepted := int64(sStatus[http.StatusOK])
	inFlight := accepted * int64(len(body))
	ratio := float64(hwm-rss0) / float64(max(inFlight, 1))
	logf("bigbody: 16 runsync of 20 MB: %v in %v; VmRSS %s, VmHWM %s", sStatus, sTime.Round(time.Millisecond), mib(rss), mib(hwm))

	s := section{title: "Big bodies: memory against request-body bytes in flight",
		setup: fmt.Sprintf("A fresh `gantry serve` (default body budget 256 MiB), endpoint with workers.max 0. First 8 concurrent keyless POST /v2/{endpoint}/job-done/w1/j1 of 60 MB each; "+
			"then 16 concurrent POST /runsync?wait=5000 of %d bytes each (the jobs stay queued; each answers after 5 s). VmRSS/VmHWM from /proc/<pid>/status.", len(body))}
	s.rows = append(s.rows,
		row{"keyless 60 MB posts: statuses, time", fmt.Sprintf("%v, %v", kStatus, kTime.Round(time.Millisecond)), "", "all 401, at once", b.verdict("bigbody", kStatus[http.StatusUnauthorized] == 8, "")},
		row{"VmHWM before / after the keyless posts", mib(hwm0) + " / " + mib(hwmKeyless), "", "unchanged", b.verdict("bigbody", hwmKeyless-hwm0 < 32<<20, mib(hwmKeyless-hwm0)+" more")},
		row{"runsync statuses (200 held, 503 past the budget), time to the last answer", fmt.Sprintf("%v, %v", sStatus, sTime.Round(time.Millisecond)), "", "", ""},
		row{"runsync bodies in flight", mib(inFlight), "", "", ""},
		row{"VmHWM growth / bodies in flight", fmt.Sprintf("%s / %s = %.2fx", mib(hwm-rss0), mib(inFlight), ratio), "", "<= 2x", b.verdict("bigbody", ratio <= 2, fmt.Sprintf("%.2fx", ratio))},
		row{"VmRSS after the runsync answers", mib(rss), "", "", ""},
	)
	b.sections = append(b.sections, s)
	return nil
}
