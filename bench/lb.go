package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// The lb scenario (issue 6): a LOAD_BALANCER endpoint's proxy against calling its one worker
// directly, in the same run on the same cores. One gantry/http-echo worker (workers.min =
// workers.max = 1, REQUEST_COUNT with a large requestCount, a long idleTimeout) serves every
// pass; the bench finds its own port and sends the same GET to {base}/lb/{id}/x and to
// http://127.0.0.1:<port>/x, alternating direct and proxy passes.

// createLBEndpoint creates a LOAD_BALANCER endpoint from template gantry-http-echo with
// exactly one worker that never scales up or retires during the run.
func (g *gantry) createLBEndpoint(name string) (string, error) {
	body := fmt.Sprintf(`{"name":%q,"type":"LOAD_BALANCER","templateId":"gantry-http-echo","gpu":{"pools":["local"]},`+
		`"workers":{"min":1,"max":1,"idleTimeout":3600},"scaling":{"type":"REQUEST_COUNT","requestCount":100000}}`, name)
	return g.postEndpoint(name, body)
}

// workerInfo is one item of GET /v2/serverless/{id}/workers.
type workerInfo struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// workers lists an endpoint's workers (GET /v2/serverless/{id}/workers).
func (g *gantry) workers(ep string) ([]workerInfo, error) {
	b, err := g.get("/v2/serverless/" + ep + "/workers")
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []workerInfo `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("the workers list %.200s: %w", b, err)
	}
	return list.Items, nil
}

// get is a management GET with the key; it wants a 200.
func (g *gantry) get(path string) ([]byte, error) {
	req, _ := http.NewRequest("GET", g.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+g.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: %d %.300s", path, resp.StatusCode, b)
	}
	return b, nil
}

// echoListeningRE is the line gantry/http-echo logs for each port it listens on.
var echoListeningRE = regexp.MustCompile(`msg="http-echo listening" addr=(\S+)`)

// lbWorker returns the endpoint's one live worker and the loopback address of its PORT. The
// port is read from the worker's own log through the API (GET
// /v2/serverless/{id}/workers/{worker}/logs: "http-echo listening addr=[::]:PORT"), which
// works for any pool and needs no pid, and is then checked: a GET to it must be answered by
// that worker (http-echo puts its RUNPOD_POD_ID in every answer).
func (g *gantry) lbWorker(ep string) (id, addr string, err error) {
	ws, err := g.workers(ep)
	if err != nil {
		return "", "", err
	}
	var live []string
	for _, w := range ws {
		if w.Status != "EXITED" {
			live = append(live, w.ID)
		}
	}
	if len(live) != 1 {
		return "", "", fmt.Errorf("want exactly one live worker of %s; the workers list says %+v", ep, ws)
	}
	id = live[0]
	deadline := time.Now().Add(10 * time.Second)
	for {
		logs, err := g.get("/v2/serverless/" + ep + "/workers/" + id + "/logs?tail=100")
		if err != nil {
			return "", "", err
		}
		if m := echoListeningRE.FindSubmatch(logs); m != nil {
			_, port, err := net.SplitHostPort(string(m[1]))
			if err != nil {
				return "", "", fmt.Errorf("worker %s logged the address %q: %w", id, m[1], err)
			}
			addr = net.JoinHostPort("127.0.0.1", port)
			break
		}
		if time.Now().After(deadline) {
			return "", "", fmt.Errorf("worker %s logged no \"http-echo listening\" line in 10 s; its log: %.500s", id, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return id, addr, nil
}

// checkEcho sends one GET and wants a 200 from http-echo worker id.
func checkEcho(url string, header []string, id string) error {
	p := newRequester("GET", url, header, nil)
	defer p.close()
	ok, err := p.do()
	if err != nil || !ok || !strings.Contains(string(p.body), `"worker":"`+id+`"`) {
		return fmt.Errorf("GET %s answered %.300s (ok %v, err %v); want a 2xx from worker %s", url, p.body, ok, err, id)
	}
	return nil
}

// lbWrkScript makes wrk send a GET with the header lines given, and print its summary.
func lbWrkScript(header []string) string {
	var b strings.Builder
	b.WriteString("wrk.method = \"GET\"\n")
	for _, h := range header {
		k, v, _ := strings.Cut(h, ": ")
		fmt.Fprintf(&b, "wrk.headers[%q] = [==[%s]==]\n", k, v)
	}
	b.WriteString(strings.ReplaceAll(wrkDone, "%%", "%")) // wrkDone is written as a format string
	return b.String()
}

// lbPass is one measured pass against one target, with the servers' CPU during it.
type lbPass struct {
	r         loadResult
	serveCPU  float64 // gantry serve, CPU-s
	workerCPU float64 // the worker process, CPU-s
}

// lbSide is the passes of one target (proxy or direct) at one load.
type lbSide []lbPass

func (s lbSide) mean(f func(lbPass) float64) float64 {
	if len(s) == 0 {
		return 0
	}
	var sum float64
	for _, p := range s {
		sum += f(p)
	}
	return sum / float64(len(s))
}

func (s lbSide) p50() time.Duration {
	return time.Duration(s.mean(func(p lbPass) float64 { return float64(p.r.P50) }))
}
func (s lbSide) p99() time.Duration {
	return time.Duration(s.mean(func(p lbPass) float64 { return float64(p.r.P99) }))
}
func (s lbSide) rate() float64 { return s.mean(func(p lbPass) float64 { return p.r.rate() }) }

func (s lbSide) totals() (requests, errors, socket, bytes int64, serveCPU, workerCPU float64) {
	for _, p := range s {
		requests += p.r.Requests
		errors += p.r.Errors
		socket += p.r.SocketErrors
		bytes += p.r.Bytes
		serveCPU += p.serveCPU
		workerCPU += p.workerCPU
	}
	return
}

// each lists a figure of every pass.
func (s lbSide) each(f func(lbPass) string) string {
	var out []string
	for _, p := range s {
		out = append(out, f(p))
	}
	return strings.Join(out, ", ")
}

func (b *bench) scenarioLB() error {
	o := b.o
	g, err := b.startGantry("lb")
	if err != nil {
		return err
	}
	defer g.stop()
	ep, err := g.createLBEndpoint("bench-lb")
	if err != nil {
		return err
	}
	ready, err := g.waitWorkers(ep, 1, 60*time.Second)
	if err != nil {
		return err
	}
	id, addr, err := g.lbWorker(ep)
	if err != nil {
		return err
	}
	logf("lb: endpoint %s, worker %s ready after %v, its PORT at %s", ep, id, ready.Round(time.Millisecond), addr)
	header := []string{"Accept: application/json", "Authorization: Bearer " + g.key, "X-Bench: lb"}
	proxyURL, directURL := g.base+"/lb/"+ep+o.lbPath, "http://"+addr+o.lbPath
	for _, u := range []string{proxyURL, directURL} {
		if err := checkEcho(u, header, id); err != nil {
			return err
		}
	}
	script := filepath.Join(b.tmp, "lb.lua")
	if err := os.WriteFile(script, []byte(lbWrkScript(header)), 0o600); err != nil {
		return err
	}
	targets := []struct{ name, url string }{{"direct", directURL}, {"proxy", proxyURL}}
	// measure runs a direct pass, then a proxy pass, and returns them proxy first.
	measure := func(run func(name, url string) (loadResult, error)) (lbPass, lbPass, error) {
		var out [2]lbPass
		for i, t := range targets {
			s0, w0 := g.cpu(), workerCPU(g)
			r, err := run(t.name, t.url)
			if err != nil {
				return lbPass{}, lbPass{}, fmt.Errorf("%s: %w", t.name, err)
			}
			out[i] = lbPass{r: r, serveCPU: g.cpu() - s0, workerCPU: workerCPU(g) - w0}
			logf("  %s: %.0f req/s, p50 %v, p99 %v, errors %d", t.name, r.rate(), r.P50, r.P99, r.Errors)
		}
		return out[1], out[0], nil
	}

	// Unmeasured: open the proxy's connections to the worker and warm both servers.
	for _, t := range targets {
		if _, err := b.wrk("lb-warmup-"+t.name, t.url, script, o.lbThreads, o.lbConns, 2*time.Second); err != nil {
			return err
		}
	}
	var lightP, lightD, closedP, closedD, satP, satD lbSide
	for round := 1; round <= o.lbRounds; round++ {
		logf("lb round %d/%d: paced %.0f req/s over %d connections, %v per target", round, o.lbRounds, o.lbRate, o.lbLightConns, o.lbDuration)
		p, d, err := measure(func(_, url string) (loadResult, error) {
			return pacedWith(func() *poster { return newRequester("GET", url, header, nil) }, o.lbRate, o.lbLightConns, o.lbDuration, true), nil
		})
		if err != nil {
			return err
		}
		lightP, lightD = append(lightP, p), append(lightD, d)
		logf("lb round %d/%d: wrk %d connections (closed loop)", round, o.lbRounds, o.lbLightConns)
		p, d, err = measure(func(name, url string) (loadResult, error) {
			return b.wrk(fmt.Sprintf("lb-c%d-%s-%d", o.lbLightConns, name, round), url, script, o.lbThreads, o.lbLightConns, o.lbDuration, "--latency")
		})
		if err != nil {
			return err
		}
		closedP, closedD = append(closedP, p), append(closedD, d)
		logf("lb round %d/%d: wrk %d connections (saturation)", round, o.lbRounds, o.lbConns)
		p, d, err = measure(func(name, url string) (loadResult, error) {
			return b.wrk(fmt.Sprintf("lb-c%d-%s-%d", o.lbConns, name, round), url, script, o.lbThreads, o.lbConns, o.lbDuration, "--latency")
		})
		if err != nil {
			return err
		}
		satP, satD = append(satP, p), append(satD, d)
	}
	// Still the one worker it started with (the endpoint never scaled), idle again once the
	// health figures are republished (the scheduler's tick, every second).
	settled, err := g.waitWorkers(ep, 1, 10*time.Second)
	if err != nil {
		return err
	}
	after, err := g.workers(ep)
	if err != nil {
		return err
	}
	h, err := g.health(http.DefaultClient, ep)
	if err != nil {
		return err
	}
	b.reportLB(ep, id, addr, ready, settled, after, h, lightP, lightD, closedP, closedD, satP, satD)
	return nil
}

// workerCPU is the CPU time of gantry serve's worker processes (here the one http-echo).
func workerCPU(g *gantry) float64 { s, _ := g.childrenCPU(); return s }

func (b *bench) reportLB(ep, id, addr string, ready, settled time.Duration, after []workerInfo, h health, lightP, lightD, closedP, closedD, satP, satD lbSide) {
	o := b.o
	sec := section{title: "7. Load-balancing proxy against calling the worker directly (LOAD_BALANCER endpoint, gantry/http-echo)",
		gantryCol: "Through Gantry (`/lb/{id}/x`)", bareCol: "Direct to the worker (`127.0.0.1:PORT/x`)",
		setup: fmt.Sprintf("A LOAD_BALANCER endpoint from template gantry-http-echo on the CPU pool (process adapter): workers.min = workers.max = 1, idleTimeout 3600 s, "+
			"REQUEST_COUNT 100000, so one worker process (`gantry worker http-echo`, GOMAXPROCS=1 as the process pool runs built-in workers) serves every pass; it was ready (health idle 1) %v after the endpoint was created. "+
			"Its PORT was read from its log through GET /v2/serverless/{id}/workers/{worker}/logs and checked by a GET that the worker answered. "+
			"Every request is `GET %s` with Accept, `Authorization: Bearer <key>` (the user has unlimited quotas) and X-Bench headers, to `{base}/lb/{id}%s` and to `http://%s%s`. "+
			"The loads, each as %d rounds of a direct pass then a proxy pass of %v (after 2 s of unmeasured wrk on each): "+
			"(a) light: a paced Go generator, %d keep-alive connections, %.0f req/s in all, latency from each request's write to its whole answer; "+
			"(b) wrk -t%d -c%d --latency (closed loop); (c) saturation: wrk -t%d -c%d --latency. "+
			"A side's figure is the mean of its %d passes' figures; each pass is listed in the notes.",
			ready.Round(time.Millisecond), o.lbPath, o.lbPath, addr, o.lbPath, o.lbRounds, o.lbDuration, o.lbLightConns, o.lbRate,
			o.lbThreads, o.lbLightConns, o.lbThreads, o.lbConns, o.lbRounds)}

	added := lightP.p50() - lightD.p50()
	const addedTarget = 300 * time.Microsecond
	var pairs []string
	for i := range min(len(lightP), len(lightD)) {
		pairs = append(pairs, ms(lightP[i].r.P50-lightD[i].r.P50))
	}
	sec.rows = append(sec.rows,
		row{metric: fmt.Sprintf("(a) light load, paced %.0f req/s, %d connections: p50", o.lbRate, o.lbLightConns), gantry: ms(lightP.p50()), bare: ms(lightD.p50())},
		row{metric: "(a) p99", gantry: ms(lightP.p99()), bare: ms(lightD.p99())},
		row{metric: "(a) **added p50** (proxy p50 - direct p50)", gantry: fmt.Sprintf("**%s** (each round: %s)", ms(added), strings.Join(pairs, ", ")),
			target: "<= 0.3 ms", verdict: b.verdict("lb", added <= addedTarget, fmt.Sprintf("%.2fx the target", float64(added)/float64(addedTarget)))},
		row{metric: "(a) achieved rate", gantry: rps(lightP.rate()) + unsentSide(lightP), bare: rps(lightD.rate()) + unsentSide(lightD)},
	)
	addedClosed := closedP.p50() - closedD.p50()
	sec.rows = append(sec.rows,
		row{metric: fmt.Sprintf("(b) wrk %d connections, closed loop: throughput", o.lbLightConns), gantry: rps(closedP.rate()), bare: rps(closedD.rate())},
		row{metric: "(b) p50 / p99", gantry: ms(closedP.p50()) + " / " + ms(closedP.p99()), bare: ms(closedD.p50()) + " / " + ms(closedD.p99())},
		row{metric: "(b) added p50 (closed loop: each side as fast as 8 connections go, so both CPUs are busy: not a light load)",
			gantry: ms(addedClosed), target: "(reference)", verdict: fmt.Sprintf("%.2fx 0.3 ms", float64(addedClosed)/float64(addedTarget))},
	)
	ratio := satP.rate() / satD.rate()
	var ratios []string
	for i := range min(len(satP), len(satD)) {
		ratios = append(ratios, fmt.Sprintf("%.3fx", satP[i].r.rate()/satD[i].r.rate()))
	}
	sec.rows = append(sec.rows,
		row{metric: fmt.Sprintf("(c) saturation, wrk %d connections: throughput", o.lbConns), gantry: "**" + rps(satP.rate()) + "**", bare: rps(satD.rate()),
			target: ">= 0.45x direct", verdict: b.verdict("lb", ratio >= 0.45, fmt.Sprintf("%.3fx; each round: %s", ratio, strings.Join(ratios, ", ")))},
		row{metric: "(c) p50 / p99", gantry: ms(satP.p50()) + " / " + ms(satP.p99()), bare: ms(satD.p50()) + " / " + ms(satD.p99())},
	)
	cpuRow := func(s lbSide) string {
		n, _, _, bytes, sc, wc := s.totals()
		return fmt.Sprintf("gantry serve %.1f µs + worker %.1f µs (%.1f + %.1f CPU-s); %.0f B per answer", 1e6*sc/float64(max(n, 1)), 1e6*wc/float64(max(n, 1)), sc, wc, float64(bytes)/float64(max(n, 1)))
	}
	sec.rows = append(sec.rows, row{metric: "(c) server CPU per request (`/proc/<pid>/stat`) and answer size", gantry: cpuRow(satP), bare: cpuRow(satD)})
	errs := func(sides ...lbSide) (string, int64) {
		var n, e, sock int64
		for _, s := range sides {
			rn, re, rs, _, _, _ := s.totals()
			n, e, sock = n+rn, e+re, sock+rs
		}
		return fmt.Sprintf("%d of %d (socket errors %d)", e, n, sock), e
	}
	pe, pn := errs(lightP, closedP, satP)
	de, dn := errs(lightD, closedD, satD)
	sec.rows = append(sec.rows, row{metric: "errors over all passes (status >= 400 or socket errors; paced: non-2xx or transport errors)", gantry: pe, bare: de,
		target: "0", verdict: b.verdict("lb", pn+dn == 0, fmt.Sprint(pn+dn))})
	var ws []string
	for _, w := range after {
		ws = append(ws, w.ID+" "+w.Status)
	}
	sec.rows = append(sec.rows, row{metric: "workers after the passes (GET /v2/serverless/{id}/workers; /health)",
		gantry: fmt.Sprintf("%s; health idle %d, running %d, initializing %d (idle %v after the last pass)", strings.Join(ws, ", "),
			h.Workers.Idle, h.Workers.Running, h.Workers.Initializing, settled.Round(time.Millisecond)),
		bare: "the same process: " + id})

	passes := func(label string, p, d lbSide, f func(lbPass) string) string {
		return fmt.Sprintf("%s: direct %s; proxy %s.", label, d.each(f), p.each(f))
	}
	sec.notes = append(sec.notes,
		"Each pass, in the order run (direct first in every round). "+
			passes("(a) p50 / p99", lightP, lightD, func(p lbPass) string { return ms(p.r.P50) + " / " + ms(p.r.P99) })+" "+
			passes("(b) req/s, p50", closedP, closedD, func(p lbPass) string { return fmt.Sprintf("%s %s", rps(p.r.rate()), ms(p.r.P50)) })+" "+
			passes("(c) req/s", satP, satD, func(p lbPass) string { return rps(p.r.rate()) }),
		"What the proxy adds per request: a second HTTP/1.1 round trip on loopback (Gantry's client to the worker), the key's authentication and rate-limit accounting "+
			"(with the RateLimit headers), the endpoint lookup, picking the worker, and httputil.ReverseProxy copying headers and body. "+
			"On 2 cores shared by wrk, gantry serve and the worker, the proxied request costs the worker's CPU plus the proxy's own, so 0.5x direct is the ceiling (issue 6). "+
			"The light-load latency is measured from the write, not from the paced slot: a sleep to a sub-millisecond slot wakes up to ~1 ms late, which would be charged to both sides.",
		fmt.Sprintf("Endpoint %s; worker %s at %s.", ep, id, addr))
	b.sections = append(b.sections, sec)
}

func unsentSide(s lbSide) string {
	var n int64
	for _, p := range s {
		n += p.r.Unsent
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d slots unsent at the cut-off)", n)
}
