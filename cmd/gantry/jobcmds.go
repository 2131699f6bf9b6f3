package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/oas"
)

// ended reports whether a job status is final.
func ended(s oas.JobStatus) bool {
	return s == oas.JobStatusCOMPLETED || s == oas.JobStatusFAILED || s == oas.JobStatusCANCELLED || s == oas.JobStatusTIMEDOUT
}

// jobEndedError is a job `gantry run` waited for that did not complete: exit status 2.
type jobEndedError struct {
	id     string
	status oas.JobStatus
	reason string
}

func (e *jobEndedError) Error() string {
	if e.reason != "" {
		return fmt.Sprintf("job %s ended %s: %s", e.id, e.status, printable(e.reason))
	}
	return fmt.Sprintf("job %s ended %s", e.id, e.status)
}

// runCmd runs `gantry run ENDPOINT --input JSON | -f FILE [--sync] [--no-wait]`.
func (a *app) runCmd(ctx context.Context, args []string) error {
	fs := a.flagSet("run", "gantry run ENDPOINT --input JSON | -f input.json [--sync] [--no-wait]\n\n"+
		"Runs a job and waits for it: one progress line on stderr (state, queue delay, elapsed,\n"+
		"worker), each stream part on stdout as it comes, then the output. Exits 2 when the job\n"+
		"ends FAILED, TIMED_OUT or CANCELLED. ENDPOINT is an endpoint id or a model id.")
	c := a.commonFlags(fs)
	input := fs.String("input", "", "the job's input, a JSON object")
	file := fs.String("f", "", "read the input from `FILE` (JSON; - = stdin)")
	sync := fs.Bool("sync", false, "submit with runsync (the answer waits for the job up to --wait)")
	wait := fs.Duration("wait", 90*time.Second, "with --sync: how long runsync holds the answer (1s to 5m)")
	noWait := fs.Bool("no-wait", false, "print the job id once it is queued, and exit")
	webhook := fs.String("webhook", "", "a URL the server posts the result to when the job ends")
	timeout := fs.Duration("timeout", 0, "the job's execution timeout (policy.executionTimeout; default: the endpoint's)")
	ttl := fs.Duration("ttl", 0, "the job's lifetime from submission (policy.ttl; default 24h)")
	low := fs.Bool("low-priority", false, "queue the job as low priority (it does not scale the endpoint up)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := needArgs(fs, pos, "ENDPOINT"); err != nil {
		return err
	}
	raw, err := a.readInput(*input, *file)
	if err != nil {
		return err
	}
	if *sync && *noWait {
		return usagef("--sync and --no-wait exclude each other")
	}
	for _, d := range []struct {
		flag     string
		v        time.Duration
		min, max time.Duration
		set      bool
	}{ // the bounds of openapi.yaml's JobPolicy and runsync's wait
		{"--timeout", *timeout, 5 * time.Second, 7 * 24 * time.Hour, *timeout != 0},
		{"--ttl", *ttl, 10 * time.Second, 7 * 24 * time.Hour, *ttl != 0},
		{"--wait", *wait, time.Second, 5 * time.Minute, *sync},
	} {
		if err := inBounds(d.flag, d.v, d.min, d.max, d.set); err != nil {
			return err
		}
	}
	req := &oas.JobRequest{Input: raw}
	if *webhook != "" {
		req.Webhook = oas.NewOptString(*webhook)
	}
	if *timeout > 0 || *ttl > 0 || *low {
		var p oas.JobPolicy
		if *timeout > 0 {
			p.ExecutionTimeout = oas.NewOptInt64(timeout.Milliseconds())
		}
		if *ttl > 0 {
			p.TTL = oas.NewOptInt64(ttl.Milliseconds())
		}
		if *low {
			p.LowPriority = oas.NewOptBool(true)
		}
		req.Policy = oas.NewOptJobPolicy(p)
	}
	cn, err := a.connect(c)
	if err != nil {
		return err
	}
	ep := pos[0]
	start := time.Now()
	var id string
	first := &oas.Job{Status: oas.JobStatusINQUEUE}
	if *sync {
		j, err := answer[oas.JobHeaders](cn.api.RunSyncJob(ctx, req, oas.RunSyncJobParams{EndpointId: ep, Wait: oas.NewOptInt64(wait.Milliseconds())})).get(cn, "running the job")
		if err != nil {
			return err
		}
		if ended(j.Response.Status) {
			return a.finish(cn, &j.Response)
		}
		id, first = j.Response.ID, &j.Response
	} else {
		ack, err := answer[oas.JobAckHeaders](cn.api.RunJob(ctx, req, oas.RunJobParams{EndpointId: ep})).get(cn, "submitting the job")
		if err != nil {
			return err
		}
		id = ack.Response.ID
		if *noWait {
			if cn.out.format == "table" {
				_, err := fmt.Fprintln(a.stdout, id)
				return err
			}
			return cn.out.emit(&ack.Response, nil)
		}
	}
	first.ID = id
	return a.follow(ctx, cn, ep, id, start, first)
}

// inBounds checks a duration flag that was given against the API's bounds, in the flag's
// words (the server would name a JSON path, in milliseconds).
func inBounds(flag string, v, lo, hi time.Duration, set bool) error {
	switch {
	case !set:
		return nil
	case v < lo:
		return usagef("%s: at least %s, got %s", flag, shortDuration(lo), shortDuration(v))
	case v > hi:
		return usagef("%s: at most %s, got %s", flag, shortDuration(hi), shortDuration(v))
	}
	return nil
}

// shortDuration is d as a duration flag takes it, without zero minutes or seconds: 5s, 5m,
// 168h, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// readInput returns the job input from --input or -f, checked to be a JSON object.
func (a *app) readInput(input, file string) ([]byte, error) {
	var raw []byte
	switch {
	case input != "" && file != "":
		return nil, usagef("give --input or -f, not both")
	case input != "":
		raw = []byte(input)
	case file == "-":
		b, err := io.ReadAll(a.stdin)
		if err != nil {
			return nil, err
		}
		raw = b
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, usagef("-f: %v", err)
		}
		raw = b
	default:
		return nil, usagef("give the job's input: --input '{\"prompt\": \"...\"}' or -f input.json")
	}
	raw = bytes.TrimSpace(raw)
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, usagef("the input is not a JSON object: %s", firstLine(string(raw), 80))
	}
	return raw, nil
}

func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// follow waits for the job: it reads the stream (which holds each call up to 2 s while the
// job runs), prints the parts and a progress line, and ends with the job's output once the
// stream has ended and handed out every part.
func (a *app) follow(ctx context.Context, cn *conn, ep, id string, start time.Time, first *oas.Job) error {
	prog := &progress{a: a, id: id, start: start}
	defer prog.done()
	prog.show(first) // at once: the first stream call may hold 2 s
	for {
		s, err := answer[oas.StreamResponseHeaders](cn.api.GetJobStream(ctx, oas.GetJobStreamParams{EndpointId: ep, JobId: id})).get(cn, "reading the job's stream")
		if err != nil {
			return err
		}
		if cn.out.format == "table" {
			for _, part := range s.Response.Stream {
				prog.clear()
				fmt.Fprintln(a.stdout, compact(part.Output))
			}
		}
		j, err := answer[oas.JobHeaders](cn.api.GetJobStatus(ctx, oas.GetJobStatusParams{EndpointId: ep, JobId: id})).get(cn, "reading the job's status")
		if err != nil {
			return err
		}
		prog.show(&j.Response)
		if ended(s.Response.Status) && len(s.Response.Stream) == 0 {
			prog.done()
			return a.finish(cn, &j.Response)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// finish prints an ended job: its output (table), or the job (JSON/YAML); a job that did not
// complete is an error.
func (a *app) finish(cn *conn, j *oas.Job) error {
	if cn.out.format != "table" {
		if err := cn.out.emit(j, nil); err != nil {
			return err
		}
	} else if len(j.Output) > 0 {
		if err := cn.out.raw(j.Output); err != nil {
			return err
		}
	}
	if j.Status != oas.JobStatusCOMPLETED {
		return &jobEndedError{id: j.ID, status: j.Status, reason: j.Error.Or("")}
	}
	if c, ok := j.Cost.Get(); ok && cn.out.format == "table" {
		fmt.Fprintf(a.stderr, "cost: %s\n", costLine(c))
	}
	return nil
}

// costLine says what a model job was charged: 0.000630 USD (0.262144 megapixel at 0.0024 USD).
func costLine(c oas.JobCost) string {
	return printable(fmt.Sprintf("%s %s (%s %s at %s %s)", c.Cost, c.Currency, c.Units, c.Unit, c.UnitPrice, c.Currency))
}

// progress is `gantry run`'s progress line on stderr: redrawn in place on a terminal, else a
// line each time the state or the worker changes.
type progress struct {
	a     *app
	id    string
	start time.Time
	last  string // the state and worker last shown
	drawn bool
}

func (p *progress) show(j *oas.Job) {
	line := fmt.Sprintf("%s  %s", p.id, printable(string(j.Status)))
	key := string(j.Status) + " " + j.WorkerId.Or("")
	// Elapsed is this client's clock since it submitted; it is never shown as less than the
	// server's queue and execution times, and both are rounded alike.
	elapsed := max(time.Since(p.start).Milliseconds(), j.DelayTime.Or(0)+j.ExecutionTime.Or(0))
	line += "  queue " + ms(j.DelayTime.Or(0)) + "  elapsed " + ms(elapsed)
	if w, ok := j.WorkerId.Get(); ok {
		line += "  worker " + printable(w)
	}
	if j.Status == oas.JobStatusINPROGRESS && len(j.Output) > 0 {
		v := firstLine(compact(j.Output), 60) // the handler's last progress update
		line += "  progress " + v
		key += " " + v
	}
	if r, ok := j.Reason.Get(); ok && j.Status == oas.JobStatusINQUEUE {
		line += "  (" + printable(r) + ")"
	}
	if p.a.isTTY {
		fmt.Fprintf(p.a.stderr, "\r\033[K%s", line)
		p.drawn = true
		return
	}
	if key != p.last {
		fmt.Fprintln(p.a.stderr, line)
	}
	p.last = key
}

// clear removes the progress line before other output.
func (p *progress) clear() {
	if p.drawn {
		fmt.Fprint(p.a.stderr, "\r\033[K")
		p.drawn = false
	}
}

// done ends the progress line.
func (p *progress) done() {
	if p.drawn {
		fmt.Fprintln(p.a.stderr)
		p.drawn = false
	}
}

// jobCmd runs `gantry job status|cancel|retry|stream|list ENDPOINT [JOB]`.
func (a *app) jobCmd(ctx context.Context, args []string) error {
	sub, args, err := a.subcommand("job", args, "status", "cancel", "retry", "stream", "list")
	if err != nil {
		return err
	}
	usage := "gantry job " + sub + " ENDPOINT JOB_ID"
	if sub == "list" {
		usage = "gantry job list ENDPOINT [--status S]... [--limit N] [--cursor C]\n\nLists the endpoint's jobs, newest first (on a model, your own). Prints the cursor of\nthe next page on stderr when more are left."
	}
	fs := a.flagSet("job "+sub, usage)
	c := a.commonFlags(fs)
	var statuses stringList
	var limit int
	var cursor string
	if sub == "list" {
		fs.Var(&statuses, "status", "only jobs in this state: IN_QUEUE, IN_PROGRESS, COMPLETED, FAILED, CANCELLED or TIMED_OUT (repeatable or comma-separated)")
		fs.IntVar(&limit, "limit", 50, "list at most this many jobs")
		fs.StringVar(&cursor, "cursor", "", "start after the page that printed this cursor")
	}
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if sub == "list" {
		err = needArgs(fs, pos, "ENDPOINT")
	} else {
		err = needArgs(fs, pos, "ENDPOINT", "JOB_ID")
	}
	if err != nil {
		return err
	}
	if limit < 1 && sub == "list" {
		return usagef("--limit %d: want at least 1", limit)
	}
	if _, err := jobStatuses(statuses); err != nil {
		return err
	}
	cn, err := a.connect(c)
	if err != nil {
		return err
	}
	ep := pos[0]
	switch sub {
	case "status":
		j, err := answer[oas.JobHeaders](cn.api.GetJobStatus(ctx, oas.GetJobStatusParams{EndpointId: ep, JobId: pos[1]})).get(cn, "reading the job's status")
		if err != nil {
			return err
		}
		return cn.out.job(&j.Response)
	case "cancel", "retry":
		var ack *oas.JobAckHeaders
		if sub == "cancel" {
			ack, err = answer[oas.JobAckHeaders](cn.api.CancelJob(ctx, oas.CancelJobParams{EndpointId: ep, JobId: pos[1]})).get(cn, "cancelling the job")
		} else {
			ack, err = answer[oas.JobAckHeaders](cn.api.RetryJob(ctx, oas.RetryJobParams{EndpointId: ep, JobId: pos[1]})).get(cn, "retrying the job")
		}
		if err != nil {
			return err
		}
		return cn.out.emit(&ack.Response, func(t *table) {
			t.row("ID", "STATUS")
			t.row(ack.Response.ID, string(ack.Response.Status))
		})
	case "stream":
		parts := 0
		for {
			s, err := answer[oas.StreamResponseHeaders](cn.api.GetJobStream(ctx, oas.GetJobStreamParams{EndpointId: ep, JobId: pos[1]})).get(cn, "reading the job's stream")
			if err != nil {
				return err
			}
			parts += len(s.Response.Stream)
			if parts == 0 && ended(s.Response.Status) && cn.out.format == "table" {
				// Each part is handed out once: a client that read them (gantry run, a
				// program polling /stream) took them all.
				fmt.Fprintf(a.stderr, "gantry: job %s ended %s with no stream parts left to hand out: each part is handed out once, and this job's were already delivered (or it streamed none); gantry job status %s %s shows its output\n",
					pos[1], s.Response.Status, ep, pos[1])
			}
			if cn.out.format == "table" {
				for _, part := range s.Response.Stream {
					fmt.Fprintln(a.stdout, compact(part.Output))
				}
			} else if err := cn.out.emit(&s.Response, nil); err != nil {
				return err
			}
			if ended(s.Response.Status) {
				if e, ok := s.Response.Error.Get(); ok {
					fmt.Fprintf(a.stderr, "gantry: job %s ended %s: %s\n", pos[1], s.Response.Status, printable(e))
				}
				return nil
			}
		}
	}
	want, err := jobStatuses(statuses)
	if err != nil {
		return err
	}
	var items []oas.JobSummary
	next := cursor
	for {
		page, err := answer[oas.JobListHeaders](cn.api.ListJobs(ctx, oas.ListJobsParams{EndpointId: ep, Status: want,
			Limit: oas.NewOptInt(min(limit-len(items), 100)), Cursor: optString(next)})).get(cn, "listing jobs")
		if err != nil {
			return err
		}
		items = append(items, page.Response.Items...)
		next = page.Response.NextCursor.Or("")
		if next == "" || len(items) >= limit {
			break
		}
	}
	list := &oas.JobList{Items: items}
	if next != "" {
		list.NextCursor = oas.NewOptString(next)
	}
	if err := cn.out.emit(list, func(t *table) {
		t.row("ID", "STATUS", "CREATED", "DELAY", "EXECUTION", "RETRIES", "WORKER")
		for _, j := range items {
			t.row(j.ID, string(j.Status), when(j.CreatedAt), ms(j.DelayTime.Or(0)), ms(j.ExecutionTime.Or(0)), strconv.Itoa(j.Retries.Or(0)), j.WorkerId.Or(""))
		}
	}); err != nil {
		return err
	}
	if next != "" && cn.out.format == "table" {
		fmt.Fprintf(a.stderr, "More jobs: gantry job list %s --cursor %s\n", ep, next)
	}
	return nil
}

// jobStatuses parses --status values (repeated or comma-separated, any case); a value that
// is no job state is a usage error that lists the states.
func jobStatuses(flags []string) ([]oas.JobStatus, error) {
	var want []oas.JobStatus
	for _, f := range flags {
		for _, part := range strings.Split(f, ",") {
			st := oas.JobStatus(strings.ToUpper(strings.TrimSpace(part)))
			if err := st.Validate(); err != nil {
				var valid []string
				for _, v := range st.AllValues() {
					valid = append(valid, string(v))
				}
				return nil, usagef("--status %q: want one of %s (repeat --status, or separate them with commas)", part, strings.Join(valid, ", "))
			}
			want = append(want, st)
		}
	}
	return want, nil
}

// job prints one job: a FIELD VALUE table, or the API's JSON.
func (p *printer) job(j *oas.Job) error {
	return p.emit(j, func(t *table) {
		t.row("ID", "STATUS", "DELAY", "EXECUTION", "RETRIES", "WORKER")
		t.row(j.ID, string(j.Status), ms(j.DelayTime.Or(0)), ms(j.ExecutionTime.Or(0)), strconv.Itoa(j.Retries.Or(0)), j.WorkerId.Or(""))
		_ = t.tw.Flush()
		if r, ok := j.Reason.Get(); ok {
			fmt.Fprintf(p.w, "reason: %s\n", printable(r))
		}
		if e, ok := j.Error.Get(); ok {
			fmt.Fprintf(p.w, "error: %s\n", printable(e))
		}
		if len(j.Output) > 0 && j.Status == oas.JobStatusINPROGRESS {
			fmt.Fprintf(p.w, "progress: %s\n", compact(j.Output))
		} else if len(j.Output) > 0 {
			fmt.Fprintf(p.w, "output: %s\n", compact(j.Output))
		}
		if c, ok := j.Cost.Get(); ok {
			fmt.Fprintf(p.w, "cost: %s\n", costLine(c))
		}
	})
}
