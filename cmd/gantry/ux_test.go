package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-faster/jx"

	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/oas"
	"github.com/gantryhq/gantry/server"
)

// runLocal runs the CLI in process with no server and no saved login, as main would.
func runLocal(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	home := t.TempDir()
	a := &app{stdout: &out, stderr: &errb, stdin: strings.NewReader(""), getenv: func(k string) string {
		return map[string]string{"HOME": home, "GANTRY_URL": "http://127.0.0.1:1", "GANTRY_KEY": "gk_test"}[k]
	}}
	err := a.run(context.Background(), args)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(&errb, "gantry:", err)
	}
	return result{out: out.String(), err: errb.String(), code: exitCode(err)}
}

// TestCLIGroupHelp: every command group answers --help (and -h, help) with exit 0 and lists
// its subcommands; without a subcommand it lists them too, as a usage error.
func TestCLIGroupHelp(t *testing.T) {
	t.Parallel()
	for group, subs := range map[string][]string{
		"endpoint": {"create", "list", "get", "update", "delete"}, "endpoints": {"create", "delete"},
		"template": {"create", "list", "get", "update", "delete"}, "job": {"status", "cancel", "retry", "stream", "list"},
		"key": {"create", "list", "revoke"}, "keys": {"create", "revoke"}, "model": {"list"},
		"catalog": {"gpus", "templates", "cpus"}, "completion": {"bash", "zsh", "fish"}, "worker": {"list", "logs", "NAME"},
	} {
		for _, h := range []string{"--help", "-h", "help"} {
			res := runLocal(t, group, h)
			if res.code != 0 {
				t.Errorf("gantry %s %s: %v; want exit 0", group, h, res)
			}
			for _, s := range subs {
				if !regexp.MustCompile(`(?m)^  ` + s + `\b`).MatchString(res.out) {
					t.Errorf("gantry %s %s: stdout lacks the subcommand %s:\n%s", group, h, s, res.out)
				}
			}
		}
		if group == "worker" {
			continue // gantry worker alone runs the worker $GANTRY_WORKER names
		}
		if res := runLocal(t, group); res.code != exitUsage || !strings.Contains(res.err, "  "+subs[0]) {
			t.Errorf("gantry %s: %v; want exit 1 and the subcommands", group, res)
		}
	}
	// The built-in workers are named as words, not as a Go slice.
	res := runLocal(t, "worker", "--help")
	if !strings.Contains(res.out, "echo, http-echo, image, speech, text, video.") || strings.Contains(res.out, "[echo") {
		t.Errorf("gantry worker --help names the built-in workers so:\n%s", res.out)
	}
	if res := runLocal(t, "worker", "nope"); res.code != exitUsage || !strings.Contains(res.err, "(built-in: echo, http-echo, image, speech, text, video)") {
		t.Errorf("gantry worker nope: %v", res)
	}
	// worker list takes no -f or --tail; worker logs does.
	res = runLocal(t, "worker", "list", "--help")
	if res.code != 0 || strings.Contains(res.err, "-tail") || strings.Contains(res.err, "  -f") {
		t.Errorf("gantry worker list --help offers -f or --tail:\n%s", res.err)
	}
	if res := runLocal(t, "worker", "list", "ep", "-f"); res.code != exitUsage || !strings.Contains(res.err, "unknown flag --f") {
		t.Errorf("gantry worker list ep -f: %v; want an unknown flag", res)
	}
	if res := runLocal(t, "worker", "logs", "--help"); res.code != 0 || !strings.Contains(res.err, "-tail") || !strings.Contains(res.err, "  -f") {
		t.Errorf("gantry worker logs --help:\n%s", res.err)
	}
}

// TestCLIUsageErrorsOneLine: an unknown flag is one line, printed once; a missing argument says
// which one, with no dangling colon; a stray one says which.
func TestCLIUsageErrorsOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"endpoint", "list", "--nope"}, "gantry: endpoint list: unknown flag --nope (gantry endpoint list --help lists its flags)\n"},
		{[]string{"run", "ep", "--nope=1"}, "gantry: run: unknown flag --nope (gantry run --help lists its flags)\n"},
		{[]string{"serve", "--nope"}, "gantry: serve: unknown flag --nope (gantry serve --help lists its flags)\n"},
		{[]string{"keys", "list", "--data", "x", "--nope"}, "gantry: keys list: unknown flag --nope (gantry keys list --help lists its flags)\n"},
		{[]string{"job", "list", "ep", "--limit"}, "gantry: job list: flag needs an argument: -limit\n"},
		{[]string{"job", "status", "ep"}, "gantry: job status: missing JOB_ID (usage: gantry job status ENDPOINT JOB_ID)\n"},
		{[]string{"job", "status"}, "gantry: job status: missing ENDPOINT and JOB_ID (usage: gantry job status ENDPOINT JOB_ID)\n"},
		{[]string{"run"}, "gantry: run: missing ENDPOINT (usage: gantry run ENDPOINT)\n"},
		{[]string{"endpoint", "list", "extra"}, "gantry: endpoint list: unexpected argument \"extra\" (it takes no arguments)\n"},
		{[]string{"worker", "logs", "ep"}, "gantry: worker logs: missing WORKER (usage: gantry worker logs ENDPOINT WORKER)\n"},
	} {
		if res := runLocal(t, tc.args...); res.code != exitUsage || res.err != tc.want || res.out != "" {
			t.Errorf("gantry %v: %v\nwant exit 1 and stderr %q alone", tc.args, res, tc.want)
		}
	}
}

// TestCLIErrorsSpeakInFlags: a duration out of the API's bounds, and a --status that is no job
// state, are usage errors in the flag's words, before any call.
func TestCLIErrorsSpeakInFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "ep", "--input", "{}", "--timeout", "1s"}, "gantry: --timeout: at least 5s, got 1s\n"},
		{[]string{"run", "ep", "--input", "{}", "--timeout", "200h"}, "gantry: --timeout: at most 168h, got 200h\n"},
		{[]string{"run", "ep", "--input", "{}", "--ttl", "9s"}, "gantry: --ttl: at least 10s, got 9s\n"},
		{[]string{"run", "ep", "--input", "{}", "--sync", "--wait", "10m"}, "gantry: --wait: at most 5m, got 10m\n"},
		{[]string{"job", "list", "ep", "--status", "COMPLETED,done"}, `gantry: --status "done": want one of IN_QUEUE, IN_PROGRESS, COMPLETED, FAILED, CANCELLED, TIMED_OUT (repeat --status, or separate them with commas)` + "\n"},
	} {
		if res := runLocal(t, tc.args...); res.code != exitUsage || res.err != tc.want {
			t.Errorf("gantry %v: %v\nwant exit 1 and stderr %q", tc.args, res, tc.want)
		}
	}
}

// TestCLICatalogAndPublicTemplates: gantry catalog lists the pools' GPU types, the public
// templates and the CPU flavors; template list shows the public templates, marked so.
func TestCLICatalogAndPublicTemplates(t *testing.T) {
	t.Parallel()
	r := newRig(t, server.Options{})
	if out := r.ok("catalog", "gpus"); !strings.HasPrefix(out, "POOL ") || !regexp.MustCompile(`(?m)^local\s+CPU`).MatchString(out) {
		t.Errorf("catalog gpus =\n%s", out)
	}
	if out := r.ok("catalog", "gpus", "--availability"); !strings.Contains(out, "AVAILABLE") || !strings.Contains(out, "MAX GPU COUNT") {
		t.Errorf("catalog gpus --availability =\n%s", out)
	}
	var gpus []struct{ Pool string }
	r.okJSON(&gpus, "catalog", "gpus")
	if len(gpus) == 0 || gpus[0].Pool != "local" {
		t.Errorf("catalog gpus -o json = %+v", gpus)
	}
	if out := r.ok("catalog", "cpus"); !strings.HasPrefix(out, "ID ") {
		t.Errorf("catalog cpus =\n%s", out)
	}
	if out := r.ok("catalog", "templates"); !strings.Contains(out, "gantry-echo") {
		t.Errorf("catalog templates =\n%s", out)
	}
	r.ok("template", "create", "--name", "mine", "--image", "gantry/echo")
	out := r.ok("template", "list")
	if !regexp.MustCompile(`(?m)^gantry-echo\s.*\syes\s`).MatchString(out) || !regexp.MustCompile(`(?m)^\S+\s+mine\s.*\sno\s`).MatchString(out) ||
		!strings.Contains(out, " PUBLIC ") {
		t.Errorf("template list =\n%s\nwant mine (PUBLIC no) and gantry-echo (PUBLIC yes)", out)
	}
	if out := r.ok("template", "list", "--public=false"); strings.Contains(out, "gantry-echo") || !strings.Contains(out, "mine") {
		t.Errorf("template list --public=false =\n%s\nwant only mine", out)
	}
}

// TestCLIRunAndStreamTell: gantry run shows the handler's progress values; job stream on a
// job whose parts gantry run took says they were delivered.
func TestCLIRunAndStreamTell(t *testing.T) {
	t.Parallel()
	r := newRig(t, server.Options{})
	var ep struct{ ID string }
	r.okJSON(&ep, "endpoint", "create", "--name", "echo", "--image", "gantry/echo", "--pool", "local")
	// The progress update shows in the job's status for the 4 s the job then takes.
	res := r.run("run", ep.ID, "--input", `{"progress":[{"step":1}],"sleep_ms":4000,"echo":"done"}`)
	if res.code != 0 || !strings.Contains(res.err, `IN_PROGRESS  queue `) || !strings.Contains(res.err, `progress {"step":1}`) {
		t.Errorf("run with a progress update: %v; want the progress value on its IN_PROGRESS line", res)
	}
	checkElapsed(t, res.err)
	res = r.run("run", ep.ID, "--input", `{"stream":["a"]}`)
	if res.out != "\"a\"\n[\n  \"a\"\n]\n" {
		t.Errorf("run of a streaming job: %v; want its part, then its output", res)
	}
	id := regexp.MustCompile(`^\S+`).FindString(res.err)
	res = r.run("job", "stream", ep.ID, id)
	if res.code != 0 || res.out != "" || !strings.Contains(res.err, "ended COMPLETED with no stream parts left to hand out") ||
		!strings.Contains(res.err, "already delivered") {
		t.Errorf("job stream after gantry run took the parts: %v; want it to say so", res)
	}
}

// checkElapsed fails the test when a progress line shows an elapsed time below its queue time.
func checkElapsed(t *testing.T, lines string) {
	t.Helper()
	for _, m := range regexp.MustCompile(`queue (\S+)  elapsed (\S+)`).FindAllStringSubmatch(lines, -1) {
		q, err1 := time.ParseDuration(m[1])
		e, err2 := time.ParseDuration(m[2])
		if err1 != nil || err2 != nil || e < q {
			t.Errorf("progress %q: elapsed below the queue time", m[0])
		}
	}
}

// TestProgressLine: elapsed is never shown below the server's queue and execution times (the
// client's clock rounded 20 ms of queue to elapsed 0s); a new progress value is a new line.
func TestProgressLine(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := &progress{a: &app{stderr: &buf}, id: "j1", start: time.Now().Add(time.Hour)} // a client clock behind the server's
	p.show(&oas.Job{Status: oas.JobStatusINQUEUE, DelayTime: oas.NewOptInt64(20)})
	p.show(&oas.Job{Status: oas.JobStatusINPROGRESS, DelayTime: oas.NewOptInt64(1500), WorkerId: oas.NewOptString("w1"), Output: jx.Raw(`50`)})
	p.show(&oas.Job{Status: oas.JobStatusINPROGRESS, DelayTime: oas.NewOptInt64(1500), WorkerId: oas.NewOptString("w1"), Output: jx.Raw(`{"pct": 90}`)})
	p.show(&oas.Job{Status: oas.JobStatusCOMPLETED, DelayTime: oas.NewOptInt64(1500), ExecutionTime: oas.NewOptInt64(700), WorkerId: oas.NewOptString("w1")})
	want := "j1  IN_QUEUE  queue 20ms  elapsed 20ms\n" +
		"j1  IN_PROGRESS  queue 1.5s  elapsed 1.5s  worker w1  progress 50\n" +
		"j1  IN_PROGRESS  queue 1.5s  elapsed 1.5s  worker w1  progress {\"pct\":90}\n" +
		"j1  COMPLETED  queue 1.5s  elapsed 2.2s  worker w1\n"
	if buf.String() != want {
		t.Errorf("progress lines =\n%s\nwant\n%s", buf.String(), want)
	}
}

// costServer answers a model job (runsync and status, with its cost) and a usage report of
// two models.
func costServer(t *testing.T) string {
	mux := http.NewServeMux()
	job := `{"id":"j1","status":"COMPLETED","output":{"image_url":"http://127.0.0.1/x.png"},"delayTime":3,"executionTime":40,` +
		`"cost":{"model":"gantry-image","unit":"megapixel","measure":"pixels","quantity":32768,"units":"0.032768","unitPrice":"0.0024","cost":"0.000079","costMicros":79,"currency":"USD"}}`
	for _, p := range []string{"POST /v2/gantry-image/runsync", "GET /v2/gantry-image/status/j1"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(job))
		})
	}
	mux.HandleFunc("GET /v2/billing/usage", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"items":[` +
			`{"jobId":"j1","completedAt":"2026-11-27T10:00:00Z","model":"gantry-image","unit":"megapixel","measure":"pixels","quantity":32768,"units":"0.032768","unitPrice":"0.0024","cost":"0.000079","costMicros":79,"currency":"USD"},` +
			`{"jobId":"j2","completedAt":"2026-11-27T10:01:00Z","model":"gantry-tts","unit":"1k_characters","measure":"characters","quantity":1000,"units":"1","unitPrice":"0.015","cost":"0.015000","costMicros":15000,"currency":"USD"}],` +
			`"totals":[{"model":"gantry-image","jobs":1,"unit":"megapixel","units":"0.032768","cost":"0.000079","costMicros":79},` +
			`{"model":"gantry-tts","jobs":1,"unit":"1k_characters","units":"1","cost":"0.015000","costMicros":15000}],` +
			`"cost":"0.015079","costMicros":15079,"currency":"USD"}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestCLIModelCostAndUsage: gantry run and job status print a model job's cost; gantry usage
// prints one header, the records, and the totals in the same columns (no filler rows).
func TestCLIModelCostAndUsage(t *testing.T) {
	t.Parallel()
	u := costServer(t)
	r := &rig{t: t, home: t.TempDir(), hc: &http.Client{Transport: &http.Transport{}}}
	t.Cleanup(r.hc.CloseIdleConnections)
	env := map[string]string{"HOME": r.home, "GANTRY_URL": u, "GANTRY_KEY": "gk_test"}
	res := r.runWith(env, "", "run", "gantry-image", "--input", `{"prompt":"x"}`, "--sync")
	if res.code != 0 || !strings.Contains(res.err, "cost: 0.000079 USD (0.032768 megapixel at 0.0024 USD)\n") || strings.Contains(res.out, "cost") {
		t.Errorf("run of a model job: %v; want its cost on stderr", res)
	}
	if res := r.runWith(env, "", "job", "status", "gantry-image", "j1"); !strings.Contains(res.out, "cost: 0.000079 USD (0.032768 megapixel at 0.0024 USD)\n") {
		t.Errorf("job status of a model job: %v; want its cost", res)
	}
	res = r.runWith(env, "", "usage")
	want := "" +
		"JOB    COMPLETED             MODEL         UNITS     UNIT           COST\n" +
		"j1     2026-11-27T10:00:00Z  gantry-image  0.032768  megapixel      0.000079 USD\n" +
		"j2     2026-11-27T10:01:00Z  gantry-tts    1         1k_characters  0.015000 USD\n" +
		"TOTAL  1 job                 gantry-image  0.032768  megapixel      0.000079 USD\n" +
		"TOTAL  1 job                 gantry-tts    1         1k_characters  0.015000 USD\n" +
		"TOTAL  -                     all models    -         -              0.015079 USD\n"
	if res.code != 0 || res.out != want {
		t.Errorf("usage: %v\nwant stdout\n%s", res, want)
	}
}

// TestServeInterruptStops: SIGINT (Ctrl-C) stops gantry serve gracefully: a "stopped" line,
// exit status 0; its hint calls the binary one way, the way it was started.
func TestServeInterruptStops(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	var out lockedBuffer
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir())
	cmd.Stdout, cmd.Stderr = &out, &lockedBuffer{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	testkit.Eventually(t, "gantry serve to listen", func() bool { return strings.Contains(out.String(), "Then log in:") })
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("gantry serve after SIGINT: %v; want exit status 0\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("gantry serve did not exit within 60 s of SIGINT")
	}
	s := out.String()
	if !strings.Contains(s, "Gantry stopped") || !strings.Contains(s, bin+" key create --data ") || !strings.Contains(s, bin+" login --url http://127.0.0.1:") {
		t.Errorf("gantry serve printed:\n%s\nwant the hint calling %s, and a stopped line", s, bin)
	}
}

// TestMakeRun runs the Makefile's run target with a stand-in go command (it names two packages
// compiled) and this package's binary: make says what the first build costs before it starts,
// counts the packages, and on Ctrl-C (SIGINT to the whole process group, as a terminal sends
// it) the server stops with its "stopped" line, exits 0, and make reports no Error.
func TestMakeRun(t *testing.T) {
	t.Parallel()
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make on PATH")
	}
	bin := buildGantry(t)
	dir := t.TempDir()
	fakeGo := filepath.Join(dir, "go")
	if err := os.WriteFile(fakeGo, []byte("#!/bin/sh\necho example.com/a\necho example.com/b >&2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	cmd := exec.Command(mk, "-C", "../..", "run", "GO="+fakeGo, "BIN="+bin, "SERVE_FLAGS=--listen 127.0.0.1:0 --data "+filepath.Join(dir, "data"))
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	testkit.Eventually(t, "make run to start the server", func() bool { return strings.Contains(out.String(), "Then log in:") })
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("make run did not end within 60 s of SIGINT")
	}
	s := out.String()
	if !strings.Contains(s, "the first build compiles about 1,200 packages") || !strings.Contains(s, "packages compiled: 2\n") ||
		!strings.Contains(s, "Gantry stopped") || strings.Contains(s, "Error") || strings.Contains(s, "*** [") {
		t.Errorf("make run printed:\n%s\nwant the build's cost said first, a count of 2 packages, Gantry stopped, and no make error", s)
	}
	if i, j := strings.Index(s, "1,200 packages"), strings.Index(s, "packages compiled"); i < 0 || j < i {
		t.Errorf("make run said what the build costs after it began:\n%s", s)
	}
}
