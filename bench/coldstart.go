package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// coldRun is one measured first job on a scaled-to-zero endpoint.
type coldRun struct {
	client time.Duration // POST /runsync sent -> COMPLETED answer read
	server time.Duration // this cold start in gantry_cold_start_seconds (decision -> first poll)
	mode   string        // the histogram it landed in: start or resume ("" when none moved)
	lastMs int64         // /health coldStarts.lastMs after the run
	procs  string        // the worker processes before the run (pid:state)
}

// coldMode is one flashboot mode's runs and what the server said at the end.
type coldMode struct {
	flashboot string
	label     string // the mode as reported: the flashboot value, and the pool's suspend mode when it matters
	endpoint  string
	first     *coldRun // FLASHBOOT: the fresh start before the measured resumes
	runs      []coldRun
	health    health
	metrics   map[string]coldHist // by mode label
	waits     []time.Duration     // how long each scale-to-zero took to show
}

// coldTarget is where a cold-start scenario's workers run: how an endpoint is created there
// and how its scale-to-zero is seen.
type coldTarget struct {
	// create creates an echo endpoint that scales to zero after a second idle.
	create func(name, flashboot string) (string, error)
	// waitZero waits until the endpoint is scaled to zero (suspended: its worker suspended,
	// else gone) and returns how long that took and what the worker looked like.
	waitZero func(ep string, suspended bool, timeout time.Duration) (time.Duration, string, error)
}

func (b *bench) scenarioColdStart() error {
	g, err := b.startGantry("coldstart")
	if err != nil {
		return err
	}
	defer g.stop()
	tgt := coldTarget{create: g.createColdEndpoint, waitZero: g.waitScaledToZero}
	var modes []coldMode
	for _, fb := range []string{"OFF", "FLASHBOOT"} {
		m, err := b.coldMode(g, fb, fb, tgt)
		if err != nil {
			return fmt.Errorf("flashboot %s: %w", fb, err)
		}
		modes = append(modes, m)
	}
	b.reportColdStart(g, modes)
	return nil
}

// coldMode measures o.coldN cold starts of an echo endpoint with the flashboot mode; label
// names the mode in the log and the report.
func (b *bench) coldMode(g *gantry, fb, label string, tgt coldTarget) (coldMode, error) {
	m := coldMode{flashboot: fb, label: label}
	ep, err := tgt.create("bench-cold-"+slug(label), fb)
	if err != nil {
		return m, err
	}
	m.endpoint = ep
	p := newPoster(g.base+"/v2/"+ep+"/runsync", g.key, []byte(`{"input":{"echo":1}}`))
	defer p.close()
	runs := b.o.coldN
	if fb != "OFF" {
		runs++ // the first is a fresh start: nothing is suspended yet
	}
	for i := range runs {
		suspended := fb != "OFF" && i > 0
		waited, procs, err := tgt.waitZero(ep, suspended, b.o.coldTimeout)
		if err != nil {
			return m, fmt.Errorf("run %d: %w", i+1, err)
		}
		m.waits = append(m.waits, waited)
		before, err := g.coldMetrics(ep)
		if err != nil {
			return m, err
		}
		t0 := time.Now()
		ok, err := p.do()
		d := time.Since(t0)
		if err != nil || !ok || !bytes.Contains(p.body, []byte(`"status":"COMPLETED"`)) {
			return m, fmt.Errorf("run %d: runsync answered %.300s (err %v) after %v", i+1, p.body, err, d)
		}
		after, err := g.coldMetrics(ep)
		if err != nil {
			return m, err
		}
		h, err := g.health(http.DefaultClient, ep)
		if err != nil {
			return m, err
		}
		r := coldRun{client: d, procs: procs}
		for mode, a := range after {
			if a.count > before[mode].count {
				r.mode = mode
				r.server = time.Duration((a.sum - before[mode].sum) * float64(time.Second))
			}
		}
		if h.ColdStarts != nil {
			r.lastMs = h.ColdStarts.LastMs
		}
		logf("coldstart %s run %d: %v to COMPLETED (server: %s cold start %v; /health lastMs %d; workers before: %s; scale-to-zero showed after %v)",
			label, i+1, d.Round(10*time.Microsecond), r.mode, r.server.Round(10*time.Microsecond), r.lastMs, procs, waited.Round(time.Millisecond))
		if suspended || fb == "OFF" {
			m.runs = append(m.runs, r)
		} else {
			m.first = &r
		}
	}
	if m.health, err = g.health(http.DefaultClient, ep); err != nil {
		return m, err
	}
	if m.metrics, err = g.coldMetrics(ep); err != nil {
		return m, err
	}
	// Leave no worker behind for the next mode.
	if fb == "OFF" {
		if _, _, err := tgt.waitZero(ep, false, b.o.coldTimeout); err != nil {
			return m, err
		}
	}
	return m, nil
}

// createColdEndpoint creates an echo endpoint that scales to zero after a second idle.
func (g *gantry) createColdEndpoint(name, flashboot string) (string, error) {
	body := fmt.Sprintf(`{"name":%q,"type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["local"]},`+
		`"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"min":0,"max":1,"idleTimeout":1},"flashboot":%q}`, name, flashboot)
	return g.postEndpoint(name, body)
}

// waitScaledToZero waits until /health shows no idle, running or initializing worker and the
// server's worker processes agree: none at all, or (suspended) only stopped ones (state T,
// SIGSTOP) and /health counting them suspended. It returns how long that took and the worker
// processes it saw.
func (g *gantry) waitScaledToZero(ep string, suspended bool, timeout time.Duration) (time.Duration, string, error) {
	start := time.Now()
	var h health
	var procs []procState
	var err error
	for time.Since(start) < timeout {
		h, err = g.health(http.DefaultClient, ep)
		procs = g.workerProcs()
		if err == nil && h.Workers.Idle+h.Workers.Running+h.Workers.Initializing == 0 && h.Jobs.InQueue+h.Jobs.InProgress == 0 {
			stopped := 0
			for _, p := range procs {
				if p.state == 'T' {
					stopped++
				}
			}
			if !suspended && len(procs) == 0 {
				return time.Since(start), "none", nil
			}
			if suspended && len(procs) > 0 && stopped == len(procs) && h.Workers.Suspended > 0 {
				return time.Since(start), fmtProcs(procs), nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, "", fmt.Errorf("not scaled to zero after %v: health %+v, worker processes %s (err %v)", timeout, h.Workers, fmtProcs(procs), err)
}

// procState is a child process of the server and its state letter from /proc/<pid>/stat.
type procState struct {
	pid   int
	state byte
}

func fmtProcs(ps []procState) string {
	if len(ps) == 0 {
		return "none"
	}
	var s []string
	for _, p := range ps {
		s = append(s, fmt.Sprintf("%d:%c", p.pid, p.state))
	}
	return strings.Join(s, ",")
}

// workerProcs lists the server's live child processes (its workers) and their states.
func (g *gantry) workerProcs() []procState {
	var out []procState
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", g.cmd.Process.Pid))
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", g.cmd.Process.Pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				continue
			}
			s := string(st)
			rest := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
			if len(rest) > 0 && rest[0] != "Z" {
				out = append(out, procState{pid: pid, state: rest[0][0]})
			}
		}
	}
	return out
}

// coldHist is one gantry_cold_start_seconds series: count, sum (seconds) and the cumulative
// bucket counts by upper bound.
type coldHist struct {
	count   int64
	sum     float64
	buckets [][2]string // le, cumulative count
}

// coldMetrics reads the endpoint's gantry_cold_start_seconds series from /metrics, by mode.
func (g *gantry) coldMetrics(ep string) (map[string]coldHist, error) {
	resp, err := http.Get(g.base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("/metrics: %d %s", resp.StatusCode, b)
	}
	out := map[string]coldHist{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	want := fmt.Sprintf("endpoint=%q,mode=", ep)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "gantry_cold_start_seconds") || !strings.Contains(line, want) {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		labels, val, _ := strings.Cut(rest, "} ")
		mode := labelValue(labels, "mode")
		h := out[mode]
		switch name {
		case "gantry_cold_start_seconds_count":
			h.count, _ = strconv.ParseInt(val, 10, 64)
		case "gantry_cold_start_seconds_sum":
			h.sum, _ = strconv.ParseFloat(val, 64)
		case "gantry_cold_start_seconds_bucket":
			h.buckets = append(h.buckets, [2]string{labelValue(labels, "le"), val})
		}
		out[mode] = h
	}
	return out, sc.Err()
}

// labelValue returns a label's value from a Prometheus label list (a="x",b="y").
func labelValue(labels, name string) string {
	_, v, ok := strings.Cut(labels, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, `"`)
	return v
}

// slug makes a mode's label part of an endpoint name: "FLASHBOOT (suspend: stop)" ->
// "flashboot-suspend-stop".
func slug(s string) string {
	return strings.Join(strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return (r < 'a' || r > 'z') && (r < '0' || r > '9') }), "-")
}

// reportColdStart writes the coldstart section.
func (b *bench) reportColdStart(g *gantry, modes []coldMode) {
	o := b.o
	sec := section{noBare: true, title: "6. Cold start: the first job on a scaled-to-zero endpoint (process adapter, echo worker)",
		setup: fmt.Sprintf("`gantry serve` as above (built binary, the config's CPU pool `local` on the process adapter). For each flashboot mode an endpoint from template gantry-echo "+
			"(image gantry/echo: `gantry worker echo`, a process started by the process pool) with workers.min 0, workers.max 1, workers.idleTimeout 1 s, QUEUE_DELAY 4 s. "+
			"Before each run the bench waits until GET /v2/{id}/health shows no idle, running or initializing worker and nothing queued, and the server's child processes agree "+
			"(OFF: none alive; FLASHBOOT: only stopped ones, state T in /proc, and health workers.suspended >= 1). "+
			"The clock starts before the POST /v2/{id}/runsync {\"input\":{\"echo\":1}} is written to a keep-alive connection and stops when the whole COMPLETED answer is read. "+
			"%d runs per mode; FLASHBOOT makes one more run first, a fresh start (nothing is suspended yet), which is not counted.", o.coldN)}
	targets := map[string]time.Duration{"OFF": 300 * time.Millisecond, "FLASHBOOT": 50 * time.Millisecond}
	b.coldRows(&sec, "coldstart", targets, modes)
	b.sections = append(b.sections, sec)
}

// coldRows adds the figures of each mode to a cold-start section: the client's time against
// the flashboot value's target (a miss is recorded against scenario), the server's view, and
// a note listing every run.
func (b *bench) coldRows(sec *section, scenario string, targets map[string]time.Duration, modes []coldMode) {
	for _, m := range modes {
		var client, server []time.Duration
		var modesSeen []string
		for _, r := range m.runs {
			client = append(client, r.client)
			server = append(server, r.server)
			modesSeen = append(modesSeen, r.mode)
		}
		c, s := summarize(client), summarize(server)
		target := targets[m.flashboot]
		sec.rows = append(sec.rows,
			row{metric: fmt.Sprintf("flashboot %s: POST /runsync to COMPLETED on a scaled-to-zero endpoint (client)", m.label),
				gantry: fmt.Sprintf("p50 **%s**, max **%s**, mean %s (%d runs)", us(c.p50), us(c.max), us(c.avg), c.n),
				target: fmt.Sprintf("<= %d ms, every run (the max)", target.Milliseconds()),
				verdict: b.verdict(scenario, c.n > 0 && c.max <= target, fmt.Sprintf("max %.2fx, p50 %.2fx the target",
					float64(c.max)/float64(target), float64(c.p50)/float64(target)))},
			row{metric: fmt.Sprintf("flashboot %s: the server's cold start of each run (decision to first poll; the run's increment of gantry_cold_start_seconds_sum)", m.label),
				gantry: fmt.Sprintf("p50 %s, max %s; histogram mode per run: %s", us(s.p50), us(s.max), summarizeModes(modesSeen))},
			row{metric: fmt.Sprintf("flashboot %s: /health coldStarts after the last run", m.label), gantry: fmtHealthCold(m.health)},
			row{metric: fmt.Sprintf("flashboot %s: /metrics gantry_cold_start_seconds", m.label), gantry: fmtColdHists(m.metrics)},
		)
		if m.first != nil {
			sec.rows = append(sec.rows, row{metric: fmt.Sprintf("flashboot %s: the first run, a fresh start (not counted above)", m.label),
				gantry: fmt.Sprintf("%s to COMPLETED; server cold start %s (%s)", us(m.first.client), us(m.first.server), m.first.mode)})
		}
		var each []string
		for _, r := range m.runs {
			each = append(each, fmt.Sprintf("%s (server %s)", us(r.client), us(r.server)))
		}
		sec.notes = append(sec.notes, fmt.Sprintf("flashboot %s, each counted run, client (server cold start): %s. The wait for scale-to-zero before each run (the first on the new endpoint) took %s.",
			m.label, strings.Join(each, ", "), fmtWaits(m.waits)))
	}
	sec.notes = append(sec.notes, "The server's cold start runs from the scheduler's decision (Scheduler.Demand, called from the submit itself for the first job on an endpoint "+
		"with no worker) to the worker's first job-take poll (the job engine's ready signal); the rest of the client's time is the take, the echo, job-done and the runsync answer. "+
		"/health's lastMs and meanMs are whole milliseconds.")
}

func summarizeModes(ms []string) string {
	counts := map[string]int{}
	var order []string
	for _, m := range ms {
		if m == "" {
			m = "none"
		}
		if counts[m] == 0 {
			order = append(order, m)
		}
		counts[m]++
	}
	var s []string
	for _, m := range order {
		s = append(s, fmt.Sprintf("%s x%d", m, counts[m]))
	}
	return strings.Join(s, ", ")
}

func fmtHealthCold(h health) string {
	if h.ColdStarts == nil {
		return "none reported"
	}
	return fmt.Sprintf("count %d, lastMs %d, meanMs %d; workers.suspended %d", h.ColdStarts.Count, h.ColdStarts.LastMs, h.ColdStarts.MeanMs, h.Workers.Suspended)
}

func fmtColdHists(hs map[string]coldHist) string {
	var s []string
	for _, mode := range []string{"start", "resume"} {
		h, ok := hs[mode]
		if !ok {
			continue
		}
		var bs []string
		prev := "0"
		for _, bk := range h.buckets {
			if bk[1] != prev {
				bs = append(bs, fmt.Sprintf("le %s: %s", bk[0], bk[1]))
				prev = bk[1]
			}
		}
		mean := time.Duration(0)
		if h.count > 0 {
			mean = time.Duration(h.sum / float64(h.count) * float64(time.Second))
		}
		s = append(s, fmt.Sprintf("mode=%s: count %d, mean %s (cumulative buckets: %s)", mode, h.count, us(mean), strings.Join(bs, ", ")))
	}
	if len(s) == 0 {
		return "no series for the endpoint"
	}
	return strings.Join(s, "; ")
}

func fmtWaits(ws []time.Duration) string {
	var s []string
	for _, w := range ws {
		s = append(s, w.Round(10*time.Millisecond).String())
	}
	return strings.Join(s, ", ")
}
