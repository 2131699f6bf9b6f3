package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
)

var update = flag.Bool("update", false, "rewrite the golden files of the CLI's tables")

// rig is a Gantry server started for the test, and the CLI pointed at it.
type rig struct {
	t    *testing.T
	s    *server.Server
	url  string
	key  string // alice's key of scope all
	home string
	env  map[string]string
	hc   *http.Client
}

func newRig(t *testing.T, opts server.Options) *rig {
	t.Helper()
	s := servertest.New(t, server.Config{}, opts)
	r := &rig{t: t, s: s, url: "http://" + s.Addr(), key: servertest.Key(t, s, "alice", core.ScopeAll), home: t.TempDir(),
		hc: &http.Client{Transport: &http.Transport{}}}
	r.env = map[string]string{"HOME": r.home, "GANTRY_URL": r.url, "GANTRY_KEY": r.key}
	t.Cleanup(r.hc.CloseIdleConnections)
	return r
}

// result is one run of the CLI.
type result struct {
	out, err string
	code     int
}

func (res result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.out, res.err)
}

// run runs the CLI in process with the rig's environment, as main would: the error on stderr
// and its exit status.
func (r *rig) run(args ...string) result {
	r.t.Helper()
	return r.runWith(r.env, "", args...)
}

func (r *rig) runWith(env map[string]string, stdin string, args ...string) result {
	r.t.Helper()
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb, stdin: strings.NewReader(stdin), getenv: func(k string) string { return env[k] },
		client: r.hc, poll: 50 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := a.run(ctx, args)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(&errb, "gantry:", err)
	}
	return result{out: out.String(), err: errb.String(), code: exitCode(err)}
}

// ok runs the CLI and fails the test unless it exits 0; it returns stdout.
func (r *rig) ok(args ...string) string {
	r.t.Helper()
	res := r.run(args...)
	if res.code != 0 {
		r.t.Fatalf("gantry %s: %v", strings.Join(args, " "), res)
	}
	return res.out
}

// okJSON runs the CLI with -o json and decodes its stdout.
func (r *rig) okJSON(v any, args ...string) {
	r.t.Helper()
	out := r.ok(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		r.t.Fatalf("gantry %s -o json: %v in\n%s", strings.Join(args, " "), err, out)
	}
}

// golden compares a table with testdata/golden/NAME.txt, after each value of vary (ids) is
// replaced by its label padded to the value's length, so that the columns stay aligned.
func golden(t *testing.T, name, got string, vary map[string]string) {
	t.Helper()
	for val, label := range vary {
		if len(label) < len(val) {
			label += strings.Repeat("_", len(val)-len(label))
		}
		got = strings.ReplaceAll(got, val, label[:max(len(val), 1)])
	}
	path := filepath.Join("testdata", "golden", name+".txt")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./cmd/gantry -run %s -update writes it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n--- got\n%s--- want\n%s", name, path, got, want)
	}
}

var t0 = time.Date(2026, 11, 23, 9, 30, 0, 0, time.UTC)

func TestCLIEndpointsAndTemplates(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(t0) // a still clock: the tables' times are fixed
	r := newRig(t, server.Options{Clock: clock})

	// Create from flags, and from a YAML file with a flag overriding it.
	var ep1, ep2 struct {
		ID, Name, Image string
		Scaling         struct {
			Type       string
			QueueDelay float64
		}
		Workers struct{ Min, Max int }
	}
	r.okJSON(&ep1, "endpoint", "create", "--name", "echo", "--image", "gantry/echo", "--pool", "local", "--workers-max", "2", "--env", "A=1")
	if ep1.Name != "echo" || ep1.Image != "gantry/echo" || ep1.Scaling.Type != "QUEUE_DELAY" || ep1.Scaling.QueueDelay != 4 || ep1.Workers.Max != 2 {
		t.Errorf("created %+v; want echo, gantry/echo, QUEUE_DELAY 4 s (the default), at most 2 workers", ep1)
	}
	clock.Advance(time.Minute) // listed oldest first
	file := filepath.Join(t.TempDir(), "ep.yaml")
	os.WriteFile(file, []byte("name: from-file\ntype: QUEUE\nimage: gantry/echo\ngpu: {pools: [local]}\nscaling: {type: REQUEST_COUNT, requestCount: 3}\n"), 0o600)
	out := r.ok("endpoint", "create", "-f", file, "--name", "counted")
	ep2.ID = strings.Fields(strings.Split(out, "\n")[1])[0]
	vary := map[string]string{ep1.ID: "EP1", ep2.ID: "EP2"}
	golden(t, "endpoint-create", out, vary)
	golden(t, "endpoint-list", r.ok("endpoint", "list"), vary)
	golden(t, "endpoint-get", r.ok("endpoint", "get", ep2.ID), vary)
	for _, format := range []string{"json", "yaml"} {
		if out := r.ok("endpoint", "list", "-o", format); !strings.Contains(out, "requestCount") || !strings.Contains(out, ep2.ID) {
			t.Errorf("endpoint list -o %s = %s; want the API's fields", format, out)
		}
	}
	if out := r.ok("endpoint", "list", "-o", "id"); out != ep1.ID+"\n"+ep2.ID+"\n" {
		t.Errorf("endpoint list -o id = %q; want the two ids, a line each", out)
	}
	r.okJSON(&ep2, "endpoint", "update", ep2.ID, "--queue-delay", "10", "--workers-min", "1")
	if ep2.Scaling.Type != "QUEUE_DELAY" || ep2.Scaling.QueueDelay != 10 || ep2.Workers.Min != 1 || ep2.Name != "counted" {
		t.Errorf("updated %+v; want QUEUE_DELAY 10 s, at least 1 worker, the name kept", ep2)
	}
	if out := r.ok("endpoint", "delete", ep2.ID); out != "Deleted endpoint "+ep2.ID+".\n" {
		t.Errorf("endpoint delete = %q", out)
	}
	if res := r.run("endpoint", "get", ep2.ID); res.code != exitFailed || !strings.Contains(res.err, "404") {
		t.Errorf("endpoint get of a deleted endpoint: %v; want exit 2 and the 404", res)
	}

	// Templates.
	var tpl struct{ ID, Name string }
	r.okJSON(&tpl, "template", "create", "--name", "mine", "--image", "example/w:1", "--serverless", "--port", "8000/http")
	golden(t, "template-get", r.ok("template", "get", tpl.ID), map[string]string{tpl.ID: "TPL"})
	if out := r.ok("template", "list"); !strings.Contains(out, tpl.ID) {
		t.Errorf("template list = %s; want %s", out, tpl.ID)
	}
	r.okJSON(&tpl, "template", "update", tpl.ID, "--name", "renamed")
	if tpl.Name != "renamed" {
		t.Errorf("template update: name %q; want renamed", tpl.Name)
	}
	var list struct {
		Items []struct {
			ID       string
			IsPublic bool
		}
	}
	r.okJSON(&list, "template", "list", "--public=false")
	if len(list.Items) != 1 {
		t.Errorf("template list --public=false -o json = %+v; want the one template", list)
	}
	r.okJSON(&list, "template", "list") // the public ones follow, marked so
	if len(list.Items) < 2 || list.Items[0].ID != tpl.ID || list.Items[0].IsPublic || list.Items[1].ID != "gantry-echo" || !list.Items[1].IsPublic {
		t.Errorf("template list -o json = %+v; want the one template, then the public ones", list)
	}
	if out := r.ok("template", "delete", tpl.ID, "-o", "json"); !strings.Contains(out, `"deleted": true`) {
		t.Errorf("template delete -o json = %s", out)
	}
}

func TestCLIErrorsAndExitCodes(t *testing.T) {
	t.Parallel()
	r := newRig(t, server.Options{})
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string // on stderr
	}{
		{"a rule broken", []string{"endpoint", "create", "--name", "x", "--image", "gantry/echo", "--pool", "nope", "--pool", "local", "--workers-min", "5", "--workers-max", "1"},
			exitFailed, []string{"422", "\n  $.gpu.pools[0]: unknown pool \"nope\"", "\n  $.workers"}},
		{"not found", []string{"job", "status", "nope", "j1"}, exitFailed, []string{"404"}},
		{"an unknown flag", []string{"endpoint", "list", "--nope"}, exitUsage, []string{"unknown flag --nope"}},
		{"a missing argument", []string{"job", "status", "ep"}, exitUsage, []string{"missing JOB_ID"}},
		{"a bad input", []string{"run", "ep", "--input", "[1]"}, exitUsage, []string{"not a JSON object"}},
		{"an unknown field in a file", []string{"endpoint", "create", "-f", "/dev/null", "--name", "x"}, exitUsage, nil},
		{"an unknown command", []string{"nonsense"}, exitUsage, []string{`unknown command "nonsense"`}},
		{"an unknown subcommand", []string{"job", "frob"}, exitUsage, []string{`unknown job subcommand "frob"`}},
		{"a bad output", []string{"endpoint", "list", "-o", "xml"}, exitUsage, []string{`-o "xml"`}},
	} {
		res := r.run(tc.args...)
		if res.code != tc.code {
			t.Errorf("%s: gantry %v: %v; want exit %d", tc.name, tc.args, res, tc.code)
		}
		for _, w := range tc.want {
			if !strings.Contains(res.err, w) {
				t.Errorf("%s: gantry %v: stderr %q; want %q", tc.name, tc.args, res.err, w)
			}
		}
	}
	// A wrong key is a failed call; a server that does not answer is unreachable.
	env := map[string]string{"HOME": r.home, "GANTRY_URL": r.url, "GANTRY_KEY": "gk_wrong"}
	if res := r.runWith(env, "", "endpoint", "list"); res.code != exitFailed || !strings.Contains(res.err, "401") {
		t.Errorf("a wrong key: %v; want exit 2 and the 401", res)
	}
	env = map[string]string{"HOME": r.home, "GANTRY_URL": "http://127.0.0.1:1", "GANTRY_KEY": r.key}
	if res := r.runWith(env, "", "endpoint", "list"); res.code != exitUnreachable || !strings.Contains(res.err, "cannot reach the Gantry server at http://127.0.0.1:1") {
		t.Errorf("no server: %v; want exit 3 naming the server", res)
	}
	if res := r.runWith(map[string]string{"HOME": r.home}, "", "endpoint", "list"); res.code != exitUsage || !strings.Contains(res.err, "gantry login") {
		t.Errorf("not logged in: %v; want exit 1 pointing at gantry login", res)
	}
}

func TestCLILoginProfile(t *testing.T) {
	t.Parallel()
	r := newRig(t, server.Options{})
	home := map[string]string{"HOME": r.home}
	if res := r.runWith(home, "", "login", "--url", r.url, "--key", "gk_wrong"); res.code != exitFailed || !strings.Contains(res.err, "401") {
		t.Fatalf("login with a wrong key: %v; want exit 2 and the 401", res)
	}
	path := filepath.Join(r.home, ".config", "gantry", "config.yaml")
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed login wrote %s (%v)", path, err)
	}
	if res := r.runWith(home, "", "login", "--url", r.url, "--key", r.key, "--profile", "work"); res.code != 0 || !strings.Contains(res.out, `profile "work"`) {
		t.Fatalf("login: %v", res)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config %s: %v, mode %v; want mode 0600", path, err, fi.Mode())
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "current: work") || !strings.Contains(string(b), r.key) {
		t.Errorf("config =\n%s; want profile work, current, with its key", b)
	}
	// The saved profile serves later commands, by default and by name; the environment
	// overrides it; an unknown profile is a usage error.
	if res := r.runWith(home, "", "endpoint", "list"); res.code != 0 {
		t.Errorf("endpoint list with the saved profile: %v", res)
	}
	if res := r.runWith(home, "", "endpoint", "list", "--profile", "work"); res.code != 0 {
		t.Errorf("endpoint list --profile work: %v", res)
	}
	if res := r.runWith(map[string]string{"HOME": r.home, "GANTRY_KEY": "gk_wrong"}, "", "endpoint", "list"); res.code != exitFailed {
		t.Errorf("GANTRY_KEY over the profile: %v; want exit 2 (its wrong key used)", res)
	}
	if res := r.runWith(home, "", "endpoint", "list", "--profile", "home"); res.code != exitUsage || !strings.Contains(res.err, `no profile "home"`) {
		t.Errorf("--profile home: %v; want exit 1, no such profile", res)
	}
}

func TestCLIRunStreamingJob(t *testing.T) {
	t.Parallel()
	r := newRig(t, server.Options{})
	var ep struct{ ID string }
	r.okJSON(&ep, "endpoint", "create", "--name", "echo", "--image", "gantry/echo", "--pool", "local")

	res := r.run("run", ep.ID, "--input", `{"stream":["a","b","c"],"sleep_ms":900}`)
	if res.code != 0 || res.out != "\"a\"\n\"b\"\n\"c\"\n[\n  \"a\",\n  \"b\",\n  \"c\"\n]\n" {
		t.Errorf("run of a streaming job: %v; want the parts a line each, then the output", res)
	}
	if !regexp.MustCompile(`^\S+  IN_QUEUE  queue 0s  elapsed `).MatchString(res.err) ||
		!regexp.MustCompile(`(?m)^\S+  IN_PROGRESS  queue \S+  elapsed \S+  worker \S+$`).MatchString(res.err) ||
		!regexp.MustCompile(`(?m)^\S+  COMPLETED  queue `).MatchString(res.err) {
		t.Errorf("run's progress lines:\n%s\nwant IN_QUEUE at once, IN_PROGRESS with its worker, then COMPLETED", res.err)
	}

	input := filepath.Join(t.TempDir(), "in.json")
	os.WriteFile(input, []byte(`{"echo": {"x": 1}}`), 0o600)
	if res := r.run("run", ep.ID, "-f", input, "--sync"); res.code != 0 || res.out != "{\n  \"x\": 1\n}\n" {
		t.Errorf("run --sync -f: %v; want the output", res)
	}
	if res := r.runWith(r.env, `{"echo": "stdin"}`, "run", ep.ID, "-f", "-"); res.code != 0 || res.out != "\"stdin\"\n" {
		t.Errorf("run -f -: %v; want the output", res)
	}
	var job struct{ ID, Status, Output string }
	r.okJSON(&job, "run", ep.ID, "--input", `{"echo": "hi"}`)
	if job.Status != "COMPLETED" || job.Output != "hi" {
		t.Errorf("run -o json = %+v; want the COMPLETED job", job)
	}
	if res := r.run("run", ep.ID, "--input", `{"error": "boom"}`); res.code != exitFailed || !strings.Contains(res.err, "ended FAILED: boom") {
		t.Errorf("run of a failing job: %v; want exit 2 and the error", res)
	}
	res = r.run("run", ep.ID, "--input", `{"sleep_ms": 60000}`, "--no-wait")
	id := strings.TrimSpace(res.out)
	if res.code != 0 || strings.ContainsAny(id, " \n") || id == "" {
		t.Fatalf("run --no-wait: %v; want the job id alone", res)
	}
	if out := r.ok("job", "cancel", ep.ID, id); !strings.Contains(out, "CANCELLED") {
		t.Errorf("job cancel = %s", out)
	}
}

func TestCLIJobs(t *testing.T) {
	t.Parallel()
	r := newRig(t, server.Options{})
	var ep struct{ ID string }
	r.okJSON(&ep, "endpoint", "create", "--name", "echo", "--image", "gantry/echo", "--pool", "local")
	var ids []string
	for i := range 5 {
		res := r.run("run", ep.ID, "--input", fmt.Sprintf(`{"echo": %d}`, i), "--no-wait")
		ids = append(ids, strings.TrimSpace(res.out))
	}
	failed := strings.TrimSpace(r.run("run", ep.ID, "--input", `{"error":"boom"}`, "--no-wait").out)
	testkit.Eventually(t, "the jobs to end", func() bool {
		var l struct{ Items []struct{ ID string } }
		r.okJSON(&l, "job", "list", ep.ID, "--status", "COMPLETED,FAILED")
		return len(l.Items) == 6
	})

	// Paging: 3 of 6, the cursor of the rest on stderr, then the rest from it.
	res := r.run("job", "list", ep.ID, "--limit", "3")
	m := regexp.MustCompile(`--cursor (\S+)`).FindStringSubmatch(res.err)
	if res.code != 0 || strings.Count(res.out, "\n") != 4 || m == nil {
		t.Fatalf("job list --limit 3: %v; want a header, 3 jobs, and the next cursor", res)
	}
	for _, id := range []string{failed, ids[4], ids[3]} {
		if !strings.Contains(res.out, id) {
			t.Errorf("first page lacks %s (newest first):\n%s", id, res.out)
		}
	}
	var rest struct {
		Items      []struct{ ID, Status string }
		NextCursor string
	}
	r.okJSON(&rest, "job", "list", ep.ID, "--cursor", m[1])
	if len(rest.Items) != 3 || rest.Items[0].ID != ids[2] || rest.Items[2].ID != ids[0] || rest.NextCursor != "" {
		t.Errorf("second page = %+v; want %v newest first, and no more", rest, ids[:3])
	}
	var fails struct{ Items []struct{ ID string } }
	r.okJSON(&fails, "job", "list", ep.ID, "--status", "FAILED")
	if len(fails.Items) != 1 || fails.Items[0].ID != failed {
		t.Errorf("job list --status FAILED = %+v; want %s", fails, failed)
	}
	if res := r.run("job", "list", ep.ID, "--status", "DONE"); res.code != exitUsage || !strings.Contains(res.err, `--status "DONE": want one of IN_QUEUE,`) {
		t.Errorf("job list --status DONE: %v; want exit 1 listing the states", res)
	}

	// Status, retry, stream.
	if out := r.ok("job", "status", ep.ID, ids[1]); !strings.Contains(out, "COMPLETED") || !strings.Contains(out, "output: 1") {
		t.Errorf("job status =\n%s", out)
	}
	var st struct{ Status, Output json.RawMessage }
	r.okJSON(&st, "job", "status", ep.ID, ids[1])
	if string(st.Output) != "1" {
		t.Errorf("job status -o json output = %s; want 1", st.Output)
	}
	if out := r.ok("job", "status", ep.ID, failed); !strings.Contains(out, "FAILED") || !strings.Contains(out, "error: boom") {
		t.Errorf("job status of the failed job =\n%s", out)
	}
	if out := r.ok("job", "retry", ep.ID, failed); !strings.Contains(out, "IN_QUEUE") {
		t.Errorf("job retry = %s", out)
	}
	if res := r.run("job", "retry", ep.ID, ids[0]); res.code != exitFailed || !strings.Contains(res.err, "409") {
		t.Errorf("job retry of a completed job: %v; want exit 2 and the 409", res)
	}
	sid := strings.TrimSpace(r.run("run", ep.ID, "--input", `{"stream":[1,2],"sleep_ms":300}`, "--no-wait").out)
	if out := r.ok("job", "stream", ep.ID, sid); out != "1\n2\n" {
		t.Errorf("job stream = %q; want the parts 1 and 2", out)
	}
	if out := r.ok("job", "stream", ep.ID, sid, "-o", "json"); !strings.Contains(out, `"status": "COMPLETED"`) {
		t.Errorf("job stream -o json after the end = %s", out)
	}
}

func TestCLIKeysOverTheAPI(t *testing.T) {
	t.Parallel()
	r := newRig(t, server.Options{Clock: testkit.NewClock(t0)})
	res := r.run("key", "create", "--scope", "read", "--expires", "720h")
	lines := strings.Split(strings.TrimSpace(res.out), "\n")
	secret := lines[len(lines)-1]
	if res.code != 0 || !strings.HasPrefix(secret, core.KeyPrefix) || !strings.Contains(res.out, "scope read") {
		t.Fatalf("key create: %v", res)
	}
	env := map[string]string{"HOME": r.home, "GANTRY_URL": r.url, "GANTRY_KEY": secret}
	if res := r.runWith(env, "", "endpoint", "list"); res.code != 0 {
		t.Errorf("endpoint list with the new read key: %v", res)
	}
	if res := r.runWith(env, "", "endpoint", "create", "--name", "x", "--image", "i", "--pool", "local"); res.code != exitFailed || !strings.Contains(res.err, "403") {
		t.Errorf("endpoint create with the read key: %v; want exit 2 and the 403", res)
	}
	var keys struct {
		Items []struct {
			ID, Scope string
			CreatedAt time.Time
		}
	}
	r.okJSON(&keys, "keys", "list") // the alias
	if len(keys.Items) != 2 || keys.Items[0].Scope != "read" || keys.Items[1].Scope != "all" {
		t.Fatalf("keys list -o json = %+v; want alice's two keys, oldest first: the read one (made at the server's still %v), then the rig's", keys, t0)
	}
	read, all := keys.Items[0], keys.Items[1]
	golden(t, "key-list", r.ok("key", "list"), map[string]string{read.ID: "KEY_READ", all.ID: "KEY_ALL",
		all.CreatedAt.UTC().Format(time.RFC3339): "CREATED"}) // the rig's key is made at the time of the run
	var created struct{ ID, Secret string }
	r.okJSON(&created, "key", "create", "--scope", "jobs")
	if !strings.HasPrefix(created.Secret, core.KeyPrefix) {
		t.Errorf("key create -o json = %+v; want the secret", created)
	}
	if out := r.ok("key", "revoke", read.ID); !strings.Contains(out, "Revoked key "+read.ID) {
		t.Errorf("key revoke = %s", out)
	}
	if res := r.runWith(env, "", "endpoint", "list"); res.code != exitFailed || !strings.Contains(res.err, "401") {
		t.Errorf("the revoked key: %v; want exit 2 and the 401", res)
	}
	if res := r.run("key", "revoke", read.ID); res.code != exitFailed || !strings.Contains(res.err, "404") {
		t.Errorf("revoking it again: %v; want exit 2 and the 404", res)
	}
	if res := r.run("key", "create", "--user", "bob"); res.code != exitUsage || !strings.Contains(res.err, "--user needs --data") {
		t.Errorf("key create --user without --data: %v; want exit 1", res)
	}
	if res := r.run("key", "create", "--quota-minute", "100000"); res.code != exitFailed || !strings.Contains(res.err, "$.quota.minute") {
		t.Errorf("key create raising the quota: %v; want exit 2 naming $.quota.minute", res)
	}
}

func TestCLIModelsUsageVersionCompletion(t *testing.T) {
	t.Parallel()
	r := newRig(t, server.Options{})
	if out := r.ok("model", "list"); !strings.Contains(out, "gantry-image") || !strings.HasPrefix(out, "ID ") {
		t.Errorf("model list =\n%s", out)
	}
	var models struct{ Items []struct{ ID string } }
	r.okJSON(&models, "model", "list")
	if len(models.Items) == 0 {
		t.Errorf("model list -o json = %+v; want the models", models)
	}
	if out := r.ok("usage"); !strings.HasPrefix(out, "JOB ") || !strings.Contains(out, "TOTAL") {
		t.Errorf("usage =\n%s", out)
	}
	var usage struct{ Items []any }
	r.okJSON(&usage, "usage", "--model", "gantry-image")
	if out := r.ok("usage", "-o", "yaml"); !strings.Contains(out, "costMicros: 0") {
		t.Errorf("usage -o yaml =\n%s", out)
	}
	if out := r.ok("version"); !strings.HasPrefix(out, "gantry ") {
		t.Errorf("version = %q", out)
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		if out := r.ok("completion", sh); !strings.Contains(out, "endpoint") || !strings.Contains(out, "revoke") {
			t.Errorf("completion %s =\n%s", sh, out)
		}
	}
	if res := r.run("completion", "tcsh"); res.code != exitUsage {
		t.Errorf("completion tcsh: %v; want exit 1", res)
	}
}

// TestCLIWorkerLogsFollow runs real worker processes (the process pool running this binary's
// gantry/echo): `worker logs -f` prints the log as it grows and returns when the worker exits.
func TestCLIWorkerLogsFollow(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	r := newRig(t, server.Options{Self: bin, Builtins: builtinWorkerNames()})
	var ep struct{ ID string }
	r.okJSON(&ep, "endpoint", "create", "--name", "echo", "--image", "gantry/echo", "--pool", "local", "--idle-timeout", "3")
	if out := r.ok("run", ep.ID, "--input", `{"echo": "warm"}`); out != "\"warm\"\n" {
		t.Fatalf("run = %q", out)
	}
	var ws struct {
		Items []struct{ ID, Status string }
	}
	r.okJSON(&ws, "worker", "list", ep.ID)
	if len(ws.Items) != 1 {
		t.Fatalf("worker list = %+v; want the one worker", ws)
	}
	w := ws.Items[0].ID
	if out := r.ok("worker", "list", ep.ID); !strings.HasPrefix(out, "ID ") || !strings.Contains(out, w) || !strings.Contains(out, "local") {
		t.Errorf("worker list =\n%s", out)
	}
	start := time.Now()
	res := r.run("worker", "logs", ep.ID, w, "-f") // the worker exits once idle for 3 s
	if res.code != 0 || !strings.Contains(res.out, "msg=") {
		t.Fatalf("worker logs -f: %v; want the worker's log lines and exit 0", res)
	}
	r.okJSON(&ws, "worker", "list", ep.ID)
	if len(ws.Items) != 1 || ws.Items[0].Status != "EXITED" {
		t.Errorf("after worker logs -f returned (%v), the workers are %+v; want the one EXITED", time.Since(start), ws)
	}
	if out := r.ok("worker", "logs", ep.ID, w, "--tail", "1"); strings.Count(out, "\n") != 1 {
		t.Errorf("worker logs --tail 1 = %q; want one line", out)
	}
	if res := r.run("worker", "logs", ep.ID, "nope"); res.code != exitFailed || !strings.Contains(res.err, "404") {
		t.Errorf("worker logs of no such worker: %v; want exit 2 and the 404", res)
	}
}
