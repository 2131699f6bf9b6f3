package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
}

// jsonInput returns {"input":{...}} whose input object is about size bytes.
func jsonInput(size int) []byte {
	head := `{"prompt":"`
	tail := `","steps":30,"seed":42}`
	n := max(size-len(head)-len(tail), 1)
	pad := strings.Repeat("a photo of an astronaut riding a horse on the moon, ", n/52+1)[:n]
	return []byte(`{"input":` + head + pad + tail + `}`)
}

// loadResult is one load pass against one server.
type loadResult struct {
	Requests int64 // answered requests (any status)
	Errors   int64 // non-2xx answers plus transport errors and timeouts
	// SocketErrors are wrk's connect, read, write and timeout errors (part of Errors; the
	// rest are answers with a status of 400 or more).
	SocketErrors int64
	Bytes        int64         // wrk: bytes read
	Elapsed      time.Duration // wall time of the pass
	P50, P99     time.Duration
	Mean, Max    time.Duration
	Target       float64 // paced passes: the rate asked for (req/s)
	Unsent       int64   // paced passes: slots not sent by the cut-off (3x the pass length)
}

func (r loadResult) rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// --- wrk --------------------------------------------------------------------------------------

// wrkScript makes wrk POST body with the key, and print its summary as one JSON line.
const wrkScript = `wrk.method = "POST"
wrk.body = [==[%s]==]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = [==[%s]==]
` + wrkDone

// wrkDone is the part of every wrk script that prints the summary as one JSON line.
const wrkDone = `
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('BENCHJSON {"requests":%%d,"bytes":%%d,"duration_us":%%d,"p50_us":%%d,"p99_us":%%d,"mean_us":%%f,"max_us":%%d,"status":%%d,"connect":%%d,"read":%%d,"write":%%d,"timeout":%%d}\n',
    summary.requests, summary.bytes, summary.duration, latency:percentile(50), latency:percentile(99), latency.mean, latency.max,
    e.status, e.connect, e.read, e.write, e.timeout))
end
`

// runWrk runs wrk (-threads, -conns, -duration) against url and parses the summary its script
// prints.
func (b *bench) runWrk(label, url, key string, body []byte) (loadResult, error) {
	script := filepath.Join(b.tmp, label+".lua")
	if err := os.WriteFile(script, fmt.Appendf(nil, wrkScript, body, key), 0o600); err != nil {
		return loadResult{}, err
	}
	return b.wrk(label, url, script, b.o.wrkThreads, b.o.wrkConns, b.o.wrkDuration)
}

// wrk runs wrk with a script (which must end with wrkDone) and parses the summary; extra
// arguments go before the URL.
func (b *bench) wrk(label, url, script string, threads, conns int, d time.Duration, extra ...string) (loadResult, error) {
	secs := max(int(d.Round(time.Second).Seconds()), 1)
	args := []string{"-t", fmt.Sprint(threads), "-c", fmt.Sprint(conns), "-d", fmt.Sprintf("%ds", secs), "--timeout", "10s", "-s", script}
	cmd := exec.Command("wrk", append(append(args, extra...), url)...)
	logf("%s: %s", label, strings.Join(cmd.Args, " "))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return loadResult{}, fmt.Errorf("wrk: %w\n%s", err, out)
	}
	b.raw = append(b.raw, fmt.Sprintf("%s: %s\n%s", label, strings.Join(cmd.Args, " "), out))
	i := bytes.Index(out, []byte("BENCHJSON "))
	if i < 0 {
		return loadResult{}, fmt.Errorf("wrk printed no summary:\n%s", out)
	}
	var s struct {
		Requests   int64   `json:"requests"`
		Bytes      int64   `json:"bytes"`
		DurationUS int64   `json:"duration_us"`
		P50US      int64   `json:"p50_us"`
		P99US      int64   `json:"p99_us"`
		MeanUS     float64 `json:"mean_us"`
		MaxUS      int64   `json:"max_us"`
		Status     int64   `json:"status"`
		Connect    int64   `json:"connect"`
		Read       int64   `json:"read"`
		Write      int64   `json:"write"`
		Timeout    int64   `json:"timeout"`
	}
	line, _, _ := bytes.Cut(out[i+len("BENCHJSON "):], []byte("\n"))
	if err := json.Unmarshal(line, &s); err != nil {
		return loadResult{}, fmt.Errorf("parsing wrk's summary %q: %w", line, err)
	}
	us := time.Microsecond
	return loadResult{
		Requests: s.Requests, Bytes: s.Bytes, Errors: s.Status + s.Connect + s.Read + s.Write + s.Timeout,
		SocketErrors: s.Connect + s.Read + s.Write + s.Timeout,
		Elapsed:      time.Duration(s.DurationUS) * us,
		P50:          time.Duration(s.P50US) * us, P99: time.Duration(s.P99US) * us,
		Mean: time.Duration(s.MeanUS * float64(us)), Max: time.Duration(s.MaxUS) * us,
	}, nil
}

// --- Go clients -------------------------------------------------------------------------------

// newClient returns a keep-alive net/http client with up to conns connections to one host; the
// bench uses it for management calls and health polls.
func newClient(conns int) *http.Client {
	return &http.Client{
		Timeout: 120 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns,
			DisableCompression: true, IdleConnTimeout: time.Minute,
		},
	}
}

// post sends one POST with net/http and reads the whole answer; ok is a 2xx.
func post(c *http.Client, url, key string, body []byte) (ok bool, resp []byte, err error) {
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		return false, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", key)
	}
	r, err := c.Do(req)
	if err != nil {
		return false, nil, err
	}
	defer func() { _ = r.Body.Close() }()
	resp, err = io.ReadAll(r.Body)
	return r.StatusCode/100 == 2, resp, err
}

// poster is one keep-alive HTTP/1.1 connection that sends the same prebuilt POST again and
// again. The load generators use it instead of net/http's client because on a 2-core machine
// the client's CPU is taken from the server under test: this costs a write and a buffered read
// per request, about what wrk spends.
type poster struct {
	addr string
	req  []byte
	conn net.Conn
	br   *bufio.Reader
	body []byte // the last answer's body (reused)
}

// newPoster prepares POST url with body, Content-Type application/json and the key (bare, as
// RunPod's clients send it).
func newPoster(rawURL, key string, body []byte) *poster {
	header := []string{"Content-Type: application/json"}
	if key != "" {
		header = append(header, "Authorization: "+key)
	}
	return newRequester("POST", rawURL, header, body)
}

// newRequester prepares a request: Host and User-Agent, then the header lines given ("Name:
// value"), then Content-Length and the body when body is not nil.
func newRequester(method, rawURL string, header []string, body []byte) *poster {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: gantry-bench\r\n", method, u.RequestURI(), u.Host)
	for _, h := range header {
		b.WriteString(h + "\r\n")
	}
	if body != nil {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.Write(body)
	return &poster{addr: u.Host, req: b.Bytes()}
}

func (p *poster) close() {
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn = nil
	}
}

// do sends the request and reads the answer; ok is a 2xx. On an error the connection is
// dropped and the next call dials again.
func (p *poster) do() (ok bool, err error) {
	if p.conn == nil {
		c, err := net.DialTimeout("tcp", p.addr, 10*time.Second)
		if err != nil {
			return false, err
		}
		p.conn, p.br = c, bufio.NewReaderSize(c, 32<<10)
	}
	_ = p.conn.SetDeadline(time.Now().Add(120 * time.Second))
	if _, err := p.conn.Write(p.req); err != nil {
		p.close()
		return false, err
	}
	status, err := p.readResponse()
	if err != nil {
		p.close()
		return false, err
	}
	return status/100 == 2, nil
}

func (p *poster) readResponse() (status int, err error) {
	line, err := p.br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	// HTTP/1.1 200 OK
	if len(line) < 12 {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	length, chunked, closing := -1, false, false
	for {
		h, err := p.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		k, v, _ := bytes.Cut(h, []byte(":"))
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			length, _ = strconv.Atoi(string(v))
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		case bytes.EqualFold(k, []byte("Connection")):
			closing = bytes.EqualFold(v, []byte("close"))
		}
	}
	p.body = p.body[:0]
	switch {
	case chunked:
		for {
			sz, err := p.br.ReadSlice('\n')
			if err != nil {
				return 0, err
			}
			n, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.SplitN(sz, []byte(";"), 2)[0])), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("bad chunk size %q", sz)
			}
			if err := p.readN(int(n)); err != nil {
				return 0, err
			}
			if _, err := p.br.Discard(2); err != nil { // CRLF after the chunk
				return 0, err
			}
			if n == 0 {
				break
			}
		}
	case length >= 0:
		if err := p.readN(length); err != nil {
			return 0, err
		}
	default:
		return 0, errors.New("an answer with neither Content-Length nor chunked encoding")
	}
	if closing {
		p.close()
	}
	return status, nil
}

func (p *poster) readN(n int) error {
	start := len(p.body)
	p.body = slices.Grow(p.body, n)[:start+n]
	_, err := io.ReadFull(p.br, p.body[start:])
	return err
}

// latencies collects per-request latencies from several goroutines.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) add(d []time.Duration) { l.mu.Lock(); l.all = append(l.all, d...); l.mu.Unlock() }

// summarize fills in the percentiles of r from the latencies.
func (l *latencies) summarize(r *loadResult) {
	slices.Sort(l.all)
	n := len(l.all)
	if n == 0 {
		return
	}
	var sum time.Duration
	for _, d := range l.all {
		sum += d
	}
	pct := func(p float64) time.Duration {
		i := int(p/100*float64(n)+0.5) - 1
		return l.all[min(max(i, 0), n-1)]
	}
	r.P50, r.P99, r.Mean, r.Max = pct(50), pct(99), sum/time.Duration(n), l.all[n-1]
}

// paced sends requests at a fixed rate over conns connections for d. Each request has a slot
// at start + i/rate; a connection waits for its next slot, and a request's latency runs from
// its slot, not from when it was sent, so a server that falls behind the rate is charged the
// queueing it causes (as wrk2 does).
func paced(url, key string, body []byte, rate float64, conns int, d time.Duration) loadResult {
	return pacedWith(func() *poster { return newPoster(url, key, body) }, rate, conns, d, false)
}

// pacedWith is paced over connections that mk prepares. With fromSend, a request's latency
// runs from its write instead of its slot: the service time, for loads light enough that
// nothing queues, where the slot would charge the timer's wake-up delay (up to a
// millisecond for sub-millisecond sleeps) to the server.
func pacedWith(mk func() *poster, rate float64, conns int, d time.Duration, fromSend bool) loadResult {
	ps := make([]*poster, conns)
	var wg sync.WaitGroup
	for i := range ps {
		ps[i] = mk()
		p := ps[i]
		wg.Go(func() { _, _ = p.do() }) // open the connections first: measure steady state
	}
	wg.Wait()
	interval := time.Duration(float64(time.Second) / rate)
	total := int64(d / interval)
	var next, errs atomic.Int64
	var lat latencies
	start := time.Now().Add(10 * time.Millisecond)
	cutoff := start.Add(3 * d)
	for _, p := range ps {
		wg.Go(func() {
			defer p.close()
			own := make([]time.Duration, 0, total/int64(conns)+16)
			for time.Now().Before(cutoff) {
				i := next.Add(1) - 1
				if i >= total {
					break
				}
				slot := start.Add(time.Duration(i) * interval)
				if w := time.Until(slot); w > 0 {
					time.Sleep(w)
				}
				from := slot
				if fromSend {
					from = time.Now()
				}
				ok, err := p.do()
				own = append(own, time.Since(from))
				if !ok || err != nil {
					errs.Add(1)
				}
			}
			lat.add(own)
		})
	}
	wg.Wait()
	r := loadResult{Requests: int64(len(lat.all)), Errors: errs.Load(), Elapsed: time.Since(start), Target: rate}
	// Slots never sent waited at least until the cut-off.
	var late []time.Duration
	for i := next.Load(); i < total; i++ {
		late = append(late, max(cutoff.Sub(start.Add(time.Duration(i)*interval)), 0))
	}
	r.Unsent = int64(len(late))
	lat.add(late)
	lat.summarize(&r)
	return r
}

// sequential sends n requests one after another on one keep-alive connection, after warmup
// unmeasured ones. check, when set, says whether an answer's body is a success.
func sequential(url, key string, body []byte, warmup, n int, check func([]byte) bool) loadResult {
	p := newPoster(url, key, body)
	defer p.close()
	var errs int64
	for range warmup {
		_, _ = p.do()
	}
	own := make([]time.Duration, 0, n)
	start := time.Now()
	for range n {
		t := time.Now()
		ok, err := p.do()
		own = append(own, time.Since(t))
		if !ok || err != nil || (check != nil && !check(p.body)) {
			errs++
		}
	}
	r := loadResult{Requests: int64(n), Errors: errs, Elapsed: time.Since(start)}
	lat := latencies{all: own}
	lat.summarize(&r)
	return r
}

// burst sends n requests from clients concurrent closed-loop connections as fast as they go.
// progress, when set, is called about every 5 s with the number sent.
func burst(url, key string, body []byte, n, clients int, progress func(sent int64)) loadResult {
	var next, errs atomic.Int64
	var lat latencies
	var firstErr atomic.Value
	stop := make(chan struct{})
	if progress != nil {
		go func() {
			t := time.NewTicker(5 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					progress(min(next.Load(), int64(n)))
				}
			}
		}()
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			p := newPoster(url, key, body)
			defer p.close()
			own := make([]time.Duration, 0, n/clients+16)
			for next.Add(1) <= int64(n) {
				t := time.Now()
				ok, err := p.do()
				own = append(own, time.Since(t))
				if !ok || err != nil {
					if errs.Add(1) == 1 {
						firstErr.Store(fmt.Sprintf("%v %.200s", err, p.body))
					}
				}
			}
			lat.add(own)
		})
	}
	wg.Wait()
	close(stop)
	r := loadResult{Requests: int64(len(lat.all)), Errors: errs.Load(), Elapsed: time.Since(start)}
	lat.summarize(&r)
	if e := firstErr.Load(); e != nil {
		logf("first error: %s", e)
	}
	return r
}
