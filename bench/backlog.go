package main

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// --- backlog ---------------------------------------------------------------------------------

// backlogLevel is one fixed-rate pass with a given number of jobs queued before it.
type backlogLevel struct {
	queued        int64 // Gantry's inQueue when the pass started
	gantry, floor loadResult
}

// parseLevels reads -backlog-levels: comma-separated job counts, each with an optional k or M
// suffix (thousands, millions), ascending.
func parseLevels(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		mul := 1
		switch {
		case strings.HasSuffix(f, "k"):
			mul, f = 1000, strings.TrimSuffix(f, "k")
		case strings.HasSuffix(f, "M"):
			mul, f = 1000000, strings.TrimSuffix(f, "M")
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("backlog level %q is not a job count", f)
		}
		if len(out) > 0 && n*mul < out[len(out)-1] {
			return nil, fmt.Errorf("backlog levels must ascend: %s", s)
		}
		out = append(out, n*mul)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no backlog levels in %q", s)
	}
	return out, nil
}

// scenarioBacklog measures whether /run's tail grows with the queue behind it: one Gantry and
// one durable floor, each filled to every level in turn (bursts of /run to an endpoint without
// workers, so nothing leaves the queue), and at every level the same fixed-rate pass of /run
// against both.
func (b *bench) scenarioBacklog() error {
	levels, err := parseLevels(b.o.backlogLevels)
	if err != nil {
		return err
	}
	g, err := b.startGantry("backlog")
	if err != nil {
		return err
	}
	defer g.stop()
	ep, err := g.createEndpoint("bench-backlog", 0, 0)
	if err != nil {
		return err
	}
	floor, err := b.startFloor("backlog")
	if err != nil {
		return err
	}
	defer floor.stop()
	body := jsonInput(b.o.runInputSize)
	gURL, fURL := g.base+"/v2/"+ep+"/run", floor.base+"/v2/"+ep+"/run"
	rate, d := b.o.backlogRate, b.o.rateDuration

	var floorJobs int64 // jobs the floor has stored: what it was filled with plus its passes
	var results []backlogLevel
	for _, level := range levels {
		h, err := g.health(http.DefaultClient, ep)
		if err != nil {
			return err
		}
		if fill := int64(level) - h.Jobs.InQueue; fill > 0 {
			logf("backlog: filling gantry with %d jobs to %d queued", fill, level)
			r := burst(gURL, g.key, body, int(fill), b.o.memClients, nil)
			logf("  %.1f s (%s), %d errors", r.Elapsed.Seconds(), rps(r.rate()), r.Errors)
			if r.Errors > 0 {
				return fmt.Errorf("filling gantry to %d jobs: %d of %d submissions failed", level, r.Errors, fill)
			}
		}
		if fill := int64(level) - floorJobs; fill > 0 {
			logf("backlog: filling the durable floor with %d jobs", fill)
			r := burst(fURL, g.key, body, int(fill), b.o.memClients, nil)
			if r.Errors > 0 {
				return fmt.Errorf("filling the floor to %d jobs: %d of %d submissions failed", level, r.Errors, fill)
			}
			floorJobs += fill
		}
		if h, err = g.health(http.DefaultClient, ep); err != nil {
			return err
		}
		lv := backlogLevel{queued: h.Jobs.InQueue}
		logf("backlog: fixed rate %.0f req/s for %v: gantry (%d jobs queued)", rate, d, lv.queued)
		lv.gantry = paced(gURL, g.key, body, rate, b.o.wrkConns, d)
		logf("  gantry: %.0f req/s, p50 %v, p99 %v, errors %d, unsent %d", lv.gantry.rate(), lv.gantry.P50, lv.gantry.P99, lv.gantry.Errors, lv.gantry.Unsent)
		logf("backlog: fixed rate %.0f req/s for %v: durable floor (%d jobs stored)", rate, d, floorJobs)
		lv.floor = paced(fURL, g.key, body, rate, b.o.wrkConns, d)
		logf("  floor: %.0f req/s, p50 %v, p99 %v, errors %d, unsent %d", lv.floor.rate(), lv.floor.P50, lv.floor.P99, lv.floor.Errors, lv.floor.Unsent)
		floorJobs += lv.floor.Requests
		results = append(results, lv)
	}

	s := section{title: "Backlog: /run's tail with jobs queued behind it",
		setup: fmt.Sprintf("One `gantry serve` and one durable floor, each filled in turn to %s jobs (POST /run, input object %d bytes, %d clients, endpoint workers.max 0, so no job leaves the queue); "+
			"at every level a fixed-rate pass of %.0f req/s for %v (the paced generator of scenario 1, %d connections) to each.",
			b.o.backlogLevels, b.o.runInputSize, b.o.memClients, rate, d, b.o.wrkConns),
		gantryCol: "Gantry", bareCol: "Durable floor"}
	empty := results[0].gantry.P99
	for _, lv := range results {
		label := fmt.Sprintf("%d queued: ", lv.queued)
		s.rows = append(s.rows,
			row{label + "achieved", rps(lv.gantry.rate()) + unsent(lv.gantry), rps(lv.floor.rate()) + unsent(lv.floor), "", ""},
			row{label + "p50", ms(lv.gantry.P50), ms(lv.floor.P50), "", ""},
			row{label + "errors", fmt.Sprint(lv.gantry.Errors), fmt.Sprint(lv.floor.Errors), "0", b.verdict("backlog", lv.gantry.Errors == 0, fmt.Sprint(lv.gantry.Errors))})
		p99 := row{label + "p99", ms(lv.gantry.P99), ms(lv.floor.P99), "", ""}
		if lv.queued != results[0].queued {
			ratio := float64(lv.gantry.P99) / float64(max(empty, 1))
			p99.target = fmt.Sprintf("<= 2x the p99 at %d queued", results[0].queued)
			p99.verdict = b.verdict("backlog", ratio <= 2, fmt.Sprintf("%.2fx", ratio))
		}
		s.rows = append(s.rows, p99)
	}
	s.notes = append(s.notes,
		"Latency is measured from each request's slot, as in scenario 1, so a stall that holds up requests is charged to every request behind it. "+
			"The durable floor stores every job it is sent (Gantry's store, synced), so its keyspace grows as Gantry's does; it keeps no queue or index.")
	b.sections = append(b.sections, s)
	return nil
}
