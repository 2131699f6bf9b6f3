package main

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// bench is one run: its options, temp dir and the results gathered so far.
type bench struct {
	o       options
	tmp     string
	self    string
	started time.Time
	machine machine

	sections []section
	missed   []string // scenarios whose Gantry figure misses a target, in order
	profiles []profileResult
	failures []string
	raw      []string // raw wrk output

	schedProfile string          // CPU profile of the scheduler simulation's load phase
	schedMissed  map[string]bool // the scheduler figures that missed: tick, place, warm
}

// section is one scenario's table and notes.
type section struct {
	title  string
	setup  string
	rows   []row
	notes  []string
	noBare bool // no bare-handler column (in-process and cold-start scenarios)
	// gantryCol and bareCol head the two figure columns; "" = "Gantry" and "Bare net/http".
	gantryCol, bareCol string
}

// row is one figure: Gantry's beside the bare handler's, with the target and verdict.
type row struct {
	metric, gantry, bare, target, verdict string
}

func (b *bench) miss(scenario string) {
	for _, m := range b.missed {
		if m == scenario {
			return
		}
	}
	b.missed = append(b.missed, scenario)
}

// verdict renders a target check; a miss is recorded against the scenario.
func (b *bench) verdict(scenario string, met bool, detail string) string {
	if met {
		return "met (" + detail + ")"
	}
	b.miss(scenario)
	return "**missed** (" + detail + ")"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }
func rps(r float64) string      { return fmt.Sprintf("%.0f req/s", r) }
func unsent(r loadResult) string {
	if r.Unsent == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d slots unsent at the cut-off)", r.Unsent)
}
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// --- run -------------------------------------------------------------------------------------

func (b *bench) scenarioRun() error {
	g, err := b.startGantry("run")
	if err != nil {
		return err
	}
	defer g.stop()
	ep, err := g.createEndpoint("bench-run", 0, 0)
	if err != nil {
		return err
	}
	bare, err := b.startBare("run")
	if err != nil {
		return err
	}
	defer bare.stop()
	floor, err := b.startFloor("run")
	if err != nil {
		return err
	}
	defer floor.stop()
	body := jsonInput(b.o.runInputSize)
	gURL, bURL, fURL := g.base+"/v2/"+ep+"/run", bare.base+"/v2/"+ep+"/run", floor.base+"/v2/"+ep+"/run"
	// One check that the request is right before measuring.
	if ok, resp, err := post(http.DefaultClient, gURL, g.key, body); !ok || err != nil || !bytes.Contains(resp, []byte(`"IN_QUEUE"`)) {
		return fmt.Errorf("a /run to gantry answered %s (err %v)", resp, err)
	}

	c0 := bare.cpu()
	wb, err := b.runWrk("run-bare", bURL, g.key, body)
	if err != nil {
		return err
	}
	bareCPU := bare.cpu() - c0
	c0 = floor.cpu()
	wf, err := b.runWrk("run-floor", fURL, g.key, body)
	if err != nil {
		return err
	}
	floorCPU := floor.cpu() - c0
	c0 = g.cpu()
	wg, err := b.runWrk("run-gantry", gURL, g.key, body)
	if err != nil {
		return err
	}
	gantryCPU := g.cpu() - c0
	s := section{title: "1. Durable /run: throughput and latency",
		setup: fmt.Sprintf("POST /v2/{endpoint}/run, body %d bytes (input object %d bytes), endpoint workers.max 0 (jobs only queue; each is synced to disk before the answer). "+
			"wrk %d threads, %d connections, %v per server; the bare handler reads the body and answers {\"id\":\"<36 chars>\",\"status\":\"IN_QUEUE\"}.",
			len(body), b.o.runInputSize, b.o.wrkThreads, b.o.wrkConns, b.o.wrkDuration)}
	ratio := wg.rate() / wb.rate()
	s.rows = append(s.rows,
		row{fmt.Sprintf("throughput, wrk %dc", b.o.wrkConns), rps(wg.rate()), rps(wb.rate()), ">= 0.5x bare",
			b.verdict("run", ratio >= 0.5, fmt.Sprintf("%.3fx", ratio))},
		row{fmt.Sprintf("p50, wrk %dc", b.o.wrkConns), ms(wg.P50), ms(wb.P50), "", ""},
		row{fmt.Sprintf("p99, wrk %dc (closed loop: not the same load)", b.o.wrkConns), ms(wg.P99), ms(wb.P99), "(<= 2x bare at the same load: see the fixed-rate rows)",
			fmt.Sprintf("%.2fx", float64(wg.P99)/float64(wb.P99))},
		row{"errors (non-2xx, socket errors, timeouts)", fmt.Sprintf("%d of %d", wg.Errors, wg.Requests), fmt.Sprintf("%d of %d", wb.Errors, wb.Requests), "0",
			b.verdict("run", wg.Errors == 0, fmt.Sprint(wg.Errors))},
		row{"server CPU per request during the wrk pass", fmt.Sprintf("%.0f µs (%.1f CPU-s)", 1e6*gantryCPU/float64(max(wg.Requests, 1)), gantryCPU),
			fmt.Sprintf("%.0f µs (%.1f CPU-s)", 1e6*bareCPU/float64(max(wb.Requests, 1)), bareCPU), "", ""},
		row{fmt.Sprintf("durable floor (in the Gantry column): throughput, wrk %dc", b.o.wrkConns), fmt.Sprintf("%s (%.3fx bare; Gantry is %.3fx the floor)", rps(wf.rate()), wf.rate()/wb.rate(), wg.rate()/wf.rate()),
			rps(wb.rate()), "", ""},
		row{"durable floor: p50 / p99, wrk " + fmt.Sprint(b.o.wrkConns) + "c; errors", fmt.Sprintf("%s / %s; %d", ms(wf.P50), ms(wf.P99), wf.Errors), "", "", ""},
		row{"durable floor: server CPU per request", fmt.Sprintf("%.0f µs (%.1f CPU-s)", 1e6*floorCPU/float64(max(wf.Requests, 1)), floorCPU), "", "", ""},
	)

	// The same load: fixed rates, from a paced generator, for both servers; the lower rate
	// first, so that it is not measured behind the backlog of an overloaded pass.
	type fixedRate struct {
		rate float64
		what string
	}
	rates := []fixedRate{{0.5 * wb.rate(), "0.5x bare's wrk maximum"}}
	if g2 := 0.5 * wg.rate(); g2 < 0.9*rates[0].rate {
		rates = append([]fixedRate{{g2, "0.5x Gantry's wrk maximum"}}, rates...)
	}
	for _, fr := range rates {
		logf("fixed rate %.0f req/s for %v: bare", fr.rate, b.o.rateDuration)
		pb := paced(bURL, g.key, body, fr.rate, b.o.wrkConns, b.o.rateDuration)
		logf("  bare: %.0f req/s, p50 %v, p99 %v, errors %d", pb.rate(), pb.P50, pb.P99, pb.Errors)
		h, err := g.health(http.DefaultClient, ep)
		if err != nil {
			return err
		}
		logf("fixed rate %.0f req/s for %v: gantry (%d jobs queued)", fr.rate, b.o.rateDuration, h.Jobs.InQueue)
		pg := paced(gURL, g.key, body, fr.rate, b.o.wrkConns, b.o.rateDuration)
		logf("  gantry: %.0f req/s, p50 %v, p99 %v, errors %d, unsent %d", pg.rate(), pg.P50, pg.P99, pg.Errors, pg.Unsent)
		logf("fixed rate %.0f req/s for %v: durable floor", fr.rate, b.o.rateDuration)
		pf := paced(fURL, g.key, body, fr.rate, b.o.wrkConns, b.o.rateDuration)
		logf("  floor: %.0f req/s, p50 %v, p99 %v, errors %d, unsent %d", pf.rate(), pf.P50, pf.P99, pf.Errors, pf.Unsent)
		label := fmt.Sprintf("fixed rate %.0f req/s (%s; Gantry had %d jobs queued)", fr.rate, fr.what, h.Jobs.InQueue)
		p99ratio := float64(pg.P99) / float64(pb.P99)
		s.rows = append(s.rows,
			row{label + ": achieved", rps(pg.rate()) + unsent(pg), rps(pb.rate()) + unsent(pb), "", ""},
			row{label + ": p50", ms(pg.P50), ms(pb.P50), "", ""},
			row{label + ": p99", ms(pg.P99), ms(pb.P99), "<= 2x bare",
				b.verdict("run", p99ratio <= 2, fmt.Sprintf("%.2fx", p99ratio))},
			row{label + ": errors", fmt.Sprint(pg.Errors), fmt.Sprint(pb.Errors), "0", ""},
			row{label + ": durable floor (in the Gantry column): p50 / p99", fmt.Sprintf("%s / %s (p99 %.2fx bare's)%s", ms(pf.P50), ms(pf.P99), float64(pf.P99)/float64(pb.P99), unsent(pf)), "", "", ""},
		)
	}
	s.notes = append(s.notes,
		"wrk is closed loop: each server runs as fast as it can, so the two p99s at 64 connections are taken at different request rates. "+
			"The fixed-rate rows put both servers under the same offered load (a paced Go generator, 64 keep-alive connections, one request slot every 1/rate s; "+
			"latency is measured from a request's slot, so queueing behind a slow server counts). "+
			"A pass stops sending at 3x its length; slots never sent then count in the percentiles with the time they had waited by the cut-off (a lower bound).",
		"The durable floor is the bare handler plus the one thing a durable /run cannot skip: before answering it stores the body as a job's input through Gantry's own store (store/pebble: "+
			"the same Pebble options, the same batch of record and input, synced, Pebble's group commit), and nothing else of Gantry's (no routing, validation, keys, rate limits, queue or index). "+
			"It is the ceiling of any /run that syncs each acknowledged job to disk on this machine; measured in the same run as the other two.",
		"Load generators and servers share the machine's 2 cores. The paced generator is a minimal keep-alive HTTP/1.1 client (one prebuilt request, "+
			"a write and a buffered read per request), not net/http's client, so that it takes about as little CPU from the server as wrk does.")
	b.sections = append(b.sections, s)
	return nil
}

// --- runsync ---------------------------------------------------------------------------------

func (b *bench) scenarioRunSync() error {
	g, err := b.startGantry("runsync")
	if err != nil {
		return err
	}
	defer g.stop()
	ep, err := g.createEndpoint("bench-runsync", 1, 1)
	if err != nil {
		return err
	}
	if _, err := g.waitWorkers(ep, 1, 60*time.Second); err != nil {
		return err
	}
	bare, err := b.startBare("runsync")
	if err != nil {
		return err
	}
	defer bare.stop()
	body := []byte(`{"input":{"echo":1}}`)
	completed := func(resp []byte) bool { return bytes.Contains(resp, []byte(`"status":"COMPLETED"`)) }
	logf("runsync: %d sequential requests (+%d warm-up) to bare", b.o.runsyncN, b.o.runsyncWarmup)
	rb := sequential(bare.base+"/v2/"+ep+"/runsync", g.key, body, b.o.runsyncWarmup, b.o.runsyncN, completed)
	logf("runsync: %d sequential requests (+%d warm-up) to gantry", b.o.runsyncN, b.o.runsyncWarmup)
	rg := sequential(g.base+"/v2/"+ep+"/runsync", g.key, body, b.o.runsyncWarmup, b.o.runsyncN, completed)
	s := section{title: "2. /runsync overhead: one client, one warm echo worker",
		setup: fmt.Sprintf(`POST /v2/{endpoint}/runsync {"input":{"echo":1}}, %d sequential requests after %d unmeasured, one Go client with keep-alive; `+
			"endpoint from template gantry-echo with workers.min 1 (the worker was idle before the first request). The bare handler answers a completed job at once.",
			b.o.runsyncN, b.o.runsyncWarmup)}
	s.rows = append(s.rows,
		row{"p50", ms(rg.P50), ms(rb.P50), "<= 1 ms", b.verdict("runsync", rg.P50 <= time.Millisecond, fmt.Sprintf("%.2fx the target", float64(rg.P50)/float64(time.Millisecond)))},
		row{"p99", ms(rg.P99), ms(rb.P99), "<= 5 ms", b.verdict("runsync", rg.P99 <= 5*time.Millisecond, fmt.Sprintf("%.2fx the target", float64(rg.P99)/float64(5*time.Millisecond)))},
		row{"mean", ms(rg.Mean), ms(rb.Mean), "", ""},
		row{"max", ms(rg.Max), ms(rb.Max), "", ""},
		row{"requests/s (sequential)", rps(rg.rate()), rps(rb.rate()), "", ""},
		row{"errors (non-2xx or not COMPLETED)", fmt.Sprint(rg.Errors), fmt.Sprint(rb.Errors), "0", b.verdict("runsync", rg.Errors == 0, fmt.Sprint(rg.Errors))},
	)
	s.notes = append(s.notes, "A Gantry runsync is: submit, queue, hand to the worker's parked job-take long poll, the worker's job-done POST, then the waiting runsync answer: "+
		"three HTTP exchanges on loopback per job (client, job-take answer, job-done), against one for the bare handler.")
	b.sections = append(b.sections, s)
	return nil
}

// --- e2e -------------------------------------------------------------------------------------

// e2eResult is one end-to-end pass through Gantry.
type e2eResult struct {
	concurrency          int // jobs each worker runs at once (GANTRY_CONCURRENCY)
	warm, elapsed        time.Duration
	h                    health
	sub                  loadResult
	serveCPU, workersCPU float64
	nWorkers             int
}

func (r e2eResult) jobsPerSec() float64 { return float64(r.h.Jobs.Completed) / r.elapsed.Seconds() }

// e2ePass runs the e2e jobs through a fresh `gantry serve` whose endpoint's workers each run
// concurrency jobs at once: 1 takes them one by one with job-take, more take them in batches of
// their free slots with job-take-batch.
func (b *bench) e2ePass(concurrency int) (e2eResult, error) {
	r := e2eResult{concurrency: concurrency}
	g, err := b.startGantry(fmt.Sprintf("e2e-c%d", concurrency))
	if err != nil {
		return r, err
	}
	defer g.stop()
	n, w := b.o.e2eJobs, b.o.e2eWorkers
	ep, err := g.createEndpointEnv("bench-e2e", w, w, map[string]string{"GANTRY_CONCURRENCY": strconv.Itoa(concurrency)})
	if err != nil {
		return r, err
	}
	logf("e2e: waiting for %d idle workers (concurrency %d)", w, concurrency)
	if r.warm, err = g.waitWorkers(ep, w, 180*time.Second); err != nil {
		return r, err
	}
	logf("e2e: %d workers idle after %v; submitting %d jobs from %d clients", w, r.warm.Round(time.Millisecond), n, b.o.e2eClients)

	type doneAt struct {
		elapsed time.Duration
		h       health
		err     error
	}
	cpu0 := g.cpu()
	workersCPU0, _ := g.childrenCPU()
	start := time.Now()
	finished := make(chan doneAt, 1)
	go func() {
		c := newClient(1)
		deadline := start.Add(max(3*time.Minute, time.Duration(n)*2*time.Millisecond))
		var last health
		for {
			time.Sleep(100 * time.Millisecond)
			h, err := g.health(c, ep)
			if err == nil {
				last = h
				if h.Jobs.Completed+h.Jobs.Failed >= int64(n) {
					finished <- doneAt{elapsed: time.Since(start), h: h}
					return
				}
			}
			if time.Now().After(deadline) {
				finished <- doneAt{elapsed: time.Since(start), h: last, err: fmt.Errorf("after %v health says %+v", time.Since(start).Round(time.Second), last.Jobs)}
				return
			}
		}
	}()
	r.sub = burst(g.base+"/v2/"+ep+"/run", g.key, e2eBody, n, b.o.e2eClients, nil)
	logf("e2e: submitted in %v (%d errors); waiting for completion", r.sub.Elapsed.Round(time.Millisecond), r.sub.Errors)
	d := <-finished
	if d.err != nil {
		return r, d.err
	}
	r.elapsed, r.h = d.elapsed, d.h
	r.serveCPU = g.cpu() - cpu0
	r.workersCPU, r.nWorkers = g.childrenCPU()
	r.workersCPU -= workersCPU0
	logf("e2e: %d completed, %d failed in %v: %.0f jobs/s", r.h.Jobs.Completed, r.h.Jobs.Failed, r.elapsed.Round(time.Millisecond), r.jobsPerSec())
	return r, nil
}

var e2eBody = []byte(`{"input":{"echo":1}}`)

func (b *bench) scenarioE2E() error {
	n, w := b.o.e2eJobs, b.o.e2eWorkers
	concurrencies := []int{1}
	if b.o.e2eConcurrency > 1 {
		concurrencies = append(concurrencies, b.o.e2eConcurrency)
	}
	var passes []e2eResult
	for _, c := range concurrencies {
		r, err := b.e2ePass(c)
		if err != nil {
			return err
		}
		passes = append(passes, r)
	}
	bare, err := b.startBare("e2e")
	if err != nil {
		return err
	}
	defer bare.stop()
	bs := burst(bare.base+"/v2/e2e/run", "bare", e2eBody, n, b.o.e2eClients, nil)

	fl, err := b.e2eFloor(false)
	if err != nil {
		return err
	}
	fd, err := b.e2eFloor(true)
	if err != nil {
		return err
	}
	s := section{title: "3. End to end: jobs/s through 64 long-polling workers",
		setup: fmt.Sprintf(`%d jobs {"input":{"echo":1}} POSTed to /run by %d concurrent Go clients (keep-alive); endpoint on gantry/echo with workers.min = workers.max = %d `+
			"(worker processes started by Gantry's process pool, all idle before the first job), one fresh `gantry serve` per pass. "+
			"Time from the first submission until GET /health (polled every 100 ms) shows completed = %d. "+
			"Concurrency 1: each worker takes one job at a time with job-take (the default). Concurrency %d: the endpoint's env sets GANTRY_CONCURRENCY=%d, so each worker runs up to %d jobs at once and asks for as many as it has free slots in one job-take-batch long-poll, as the runpod SDK's job scaler does. "+
			"The bare column is the same %d POSTs from the same clients to the bare handler: the rate at which this machine can merely accept them.",
			n, b.o.e2eClients, w, n, b.o.e2eConcurrency, b.o.e2eConcurrency, b.o.e2eConcurrency, n)}
	for _, r := range passes {
		label := fmt.Sprintf("concurrency %d: ", r.concurrency)
		peer := fmt.Sprintf("%s (accept only)", rps(bs.rate()))
		if r.concurrency != 1 {
			peer = ""
		}
		s.rows = append(s.rows,
			row{label + "jobs completed per second", fmt.Sprintf("%.0f jobs/s (%d in %.2f s)", r.jobsPerSec(), r.h.Jobs.Completed, r.elapsed.Seconds()),
				peer, ">= 5,000 jobs/s",
				b.verdict("e2e", r.jobsPerSec() >= 5000 && r.h.Jobs.Completed >= int64(n), fmt.Sprintf("%.2fx the target", r.jobsPerSec()/5000))},
			row{label + "submission phase", fmt.Sprintf("%.2f s, %s", r.sub.Elapsed.Seconds(), rps(r.sub.rate())), fmt.Sprintf("%.2f s", bs.Elapsed.Seconds()), "", ""},
			row{label + "/run latency during the run: p50 / p99", ms(r.sub.P50) + " / " + ms(r.sub.P99), ms(bs.P50) + " / " + ms(bs.P99), "", ""},
			row{label + "failed jobs / submit errors", fmt.Sprintf("%d / %d", r.h.Jobs.Failed, r.sub.Errors), fmt.Sprintf("- / %d", bs.Errors), "0",
				b.verdict("e2e", r.h.Jobs.Failed == 0 && r.sub.Errors == 0, fmt.Sprintf("%d / %d", r.h.Jobs.Failed, r.sub.Errors))},
			row{label + "CPU per job: gantry serve / its worker processes", fmt.Sprintf("%.0f µs / %.0f µs (%.1f + %.1f CPU-s, %d workers, idle for %v before the first job)",
				1e6*r.serveCPU/float64(n), 1e6*r.workersCPU/float64(n), r.serveCPU, r.workersCPU, r.nWorkers, r.warm.Round(time.Millisecond)), "", "", ""},
		)
	}
	s.rows = append(s.rows,
		row{"queue floor (in the Gantry column): jobs completed per second", fmt.Sprintf("%.0f jobs/s (%d in %.2f s; Gantry at concurrency 1 is %.3fx the floor)",
			fl.jobsPerSec(), fl.h.Jobs.Completed, fl.elapsed.Seconds(), passes[0].jobsPerSec()/fl.jobsPerSec()), "", "", ""},
		row{"queue floor: submission phase; /run p50 / p99", fmt.Sprintf("%.2f s, %s; %s / %s", fl.sub.Elapsed.Seconds(), rps(fl.sub.rate()), ms(fl.sub.P50), ms(fl.sub.P99)), "", "", ""},
		row{"queue floor: CPU per job: server / its worker processes", fmt.Sprintf("%.0f µs / %.0f µs (%.1f + %.1f CPU-s, %d workers)",
			1e6*fl.serveCPU/float64(n), 1e6*fl.workersCPU/float64(n), fl.serveCPU, fl.workersCPU, fl.nWorkers), "", "", ""},
		row{"durable queue floor (in the Gantry column): jobs completed per second", fmt.Sprintf("%.0f jobs/s (%d in %.2f s; Gantry at concurrency 1 is %.3fx this floor)",
			fd.jobsPerSec(), fd.h.Jobs.Completed, fd.elapsed.Seconds(), passes[0].jobsPerSec()/fd.jobsPerSec()), "", "", ""},
		row{"durable queue floor: submission phase; /run p50 / p99", fmt.Sprintf("%.2f s, %s; %s / %s", fd.sub.Elapsed.Seconds(), rps(fd.sub.rate()), ms(fd.sub.P50), ms(fd.sub.P99)), "", "", ""},
		row{"durable queue floor: CPU per job: server / its worker processes", fmt.Sprintf("%.0f µs / %.0f µs (%.1f + %.1f CPU-s, %d workers)",
			1e6*fd.serveCPU/float64(n), 1e6*fd.workersCPU/float64(n), fd.serveCPU, fd.workersCPU, fd.nWorkers), "", "", ""},
	)
	s.notes = append(s.notes, fmt.Sprintf("The queue floor is the least any platform can do with these clients and workers: a plain net/http server (the bench binary, -bare-queue-workers) "+
		"that keeps jobs in a Go channel, in memory only (no disk, no keys, no validation, no job records, no retention), answers /run, hands each job to a parked job-take long poll "+
		"and counts job-done posts, with %d echo worker processes of the bench's own (bench -floor-worker, a fixed build: a change to Gantry's worker does not move the floor; started by it, with the environment Gantry's process pool gives them) "+
		"and the same %d clients. Completion is polled every 20 ms. It is the ceiling of the end-to-end rate on this machine; measured in the same run. "+
		"The durable queue floor adds only the writes Gantry cannot skip, through Gantry's own store (store/pebble): at /run the job's input and record, synced before the answer; "+
		"at job-take the record, not synced (a take lost in a crash is taken again); at job-done the record, synced (a completed job must not run again after a crash).", w, b.o.e2eClients))
	b.sections = append(b.sections, s)
	return nil
}

// --- memory ----------------------------------------------------------------------------------

func (b *bench) scenarioMemory() error {
	g, err := b.startGantry("memory")
	if err != nil {
		return err
	}
	defer g.stop()
	ep, err := g.createEndpoint("bench-memory", 0, 0)
	if err != nil {
		return err
	}
	n := b.o.memJobs
	body := jsonInput(b.o.memInputSize)
	rss0, _, _ := g.memory()
	logf("memory: submitting %d jobs of %d bytes from %d clients", n, len(body), b.o.memClients)
	sub := burst(g.base+"/v2/"+ep+"/run", g.key, body, n, b.o.memClients, func(sent int64) {
		rss, _, _ := g.memory()
		logf("  %d sent, gantry VmRSS %s", sent, mib(rss))
	})
	logf("memory: submitted in %v (%.0f/s, %d errors)", sub.Elapsed.Round(time.Millisecond), sub.rate(), sub.Errors)
	h, err := g.health(http.DefaultClient, ep)
	if err != nil {
		return err
	}
	rss, hwm, err := g.memory()
	if err != nil {
		return err
	}
	time.Sleep(5 * time.Second)
	rssLater, hwmLater, _ := g.memory()
	logf("memory: gantry VmRSS %s, VmHWM %s (5 s later %s / %s), inQueue %d", mib(rss), mib(hwm), mib(rssLater), mib(hwmLater), h.Jobs.InQueue)

	s := section{title: "4. Memory with 1M queued 1 KB jobs",
		setup: fmt.Sprintf("A fresh `gantry serve` (empty data dir), endpoint with workers.max 0; %d POST /run, each %d bytes (input object %d bytes), from %d concurrent Go clients. "+
			"VmRSS and VmHWM from /proc/<pid>/status right after the last answer (and 5 s later). The bare handler got the same requests.",
			n, len(body), b.o.memInputSize, b.o.memClients)}
	const gb = 1 << 30
	var bareRSS, bareHWM string = "-", "-"
	bareSub, bareLat := "-", "-"
	if b.o.memBare {
		bare, err := b.startBare("memory")
		if err != nil {
			return err
		}
		defer bare.stop()
		logf("memory: the same %d requests to the bare handler", n)
		bs := burst(bare.base+"/v2/"+ep+"/run", g.key, body, n, b.o.memClients, nil)
		r, w, err := bare.memory()
		if err != nil {
			return err
		}
		bareRSS, bareHWM = mib(r), mib(w)
		bareSub = fmt.Sprintf("%.1f s (%s)", bs.Elapsed.Seconds(), rps(bs.rate()))
		bareLat = ms(bs.P50) + " / " + ms(bs.P99)
	}
	s.rows = append(s.rows,
		row{"jobs queued (health inQueue)", fmt.Sprint(h.Jobs.InQueue), "-", fmt.Sprint(n), b.verdict("memory", h.Jobs.InQueue == int64(n), fmt.Sprintf("%d errors", sub.Errors))},
		row{"VmRSS after the submissions", mib(rss), bareRSS, "<= 1 GiB", b.verdict("memory", rss <= gb, fmt.Sprintf("%.2fx the target", float64(rss)/gb))},
		row{"VmHWM (peak resident)", mib(hwm), bareHWM, "<= 1 GiB", b.verdict("memory", hwm <= gb, fmt.Sprintf("%.2fx the target", float64(hwm)/gb))},
		row{"VmRSS / VmHWM 5 s later", mib(rssLater) + " / " + mib(hwmLater), "", "", ""},
		row{"VmRSS before the first job", mib(rss0), "", "", ""},
		row{"resident bytes per queued job", fmt.Sprintf("%.0f B", float64(rss-rss0)/float64(max(h.Jobs.InQueue, 1))), "", "", ""},
		row{"submission time", fmt.Sprintf("%.1f s (%s)", sub.Elapsed.Seconds(), rps(sub.rate())), bareSub, "", ""},
		row{"/run latency p50 / p99", ms(sub.P50) + " / " + ms(sub.P99), bareLat, "", ""},
	)
	b.sections = append(b.sections, s)
	return nil
}
