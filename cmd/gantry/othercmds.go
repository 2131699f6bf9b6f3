package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/oas"
)

// loginCmd runs `gantry login --url URL --key KEY [--profile NAME]`: it checks the key against
// the server, then saves the profile and makes it the current one.
func (a *app) loginCmd(ctx context.Context, args []string) error {
	fs := a.flagSet("login", "gantry login --url URL --key KEY|--key-stdin [--profile NAME] [--insecure]\n\nChecks the key against the server and saves it as a profile (default \"default\") in\n~/.config/gantry/config.yaml (mode 0600), the one later commands use. GANTRY_URL and\nGANTRY_KEY override it. --key-stdin (or --key -) reads the key from stdin, which keeps it\nout of the process list and the shell's history.")
	u := fs.String("url", "", "the server, e.g. http://127.0.0.1:8080 (default $GANTRY_URL)")
	key := fs.String("key", "", "an API key (default $GANTRY_KEY); - reads it from stdin")
	keyStdin := fs.Bool("key-stdin", false, "read the API key from stdin (its first line)")
	name := fs.String("profile", "default", "the profile's name")
	insecure := fs.Bool("insecure", false, insecureHelp+"; saved in the profile, for its URL")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := needArgs(fs, pos); err != nil {
		return err
	}
	if *keyStdin || *key == "-" {
		if *key != "" && *key != "-" {
			return usagef("give either --key KEY or --key-stdin, not both")
		}
		if *key, err = a.readKey(); err != nil {
			return err
		}
	}
	p := profile{URL: strings.TrimRight(cmpOr(*u, a.getenv("GANTRY_URL")), "/"), Key: cmpOr(*key, a.getenv("GANTRY_KEY")),
		Insecure: *insecure || a.getenv("GANTRY_INSECURE") == "1"}
	if p.URL == "" || p.Key == "" {
		return usagef("give --url and --key (or --key-stdin) (gantry key create --data DIR --user NAME issues the first key)")
	}
	out, _ := a.printer("table")
	cn, err := a.dial(p, out)
	if err != nil {
		return err
	}
	// The model list answers every valid key, whatever its scope.
	if _, err := answer[oas.ModelListHeaders](cn.api.ListModels(ctx)).get(cn, "checking the key"); err != nil {
		return err
	}
	cfg, path, err := a.loadConfig()
	if err != nil {
		return err
	}
	cfg.Profiles[*name] = p
	cfg.Current = *name
	if err := saveConfig(path, cfg); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "Logged in to %s as profile %q (saved in %s).\n", p.URL, *name, path)
	return nil
}

// readKey reads an API key from stdin: its first line, without surrounding spaces.
func (a *app) readKey() (string, error) {
	if a.stdin == nil {
		return "", usagef("--key-stdin: no stdin")
	}
	line, err := bufio.NewReader(io.LimitReader(a.stdin, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading the key from stdin: %w", err)
	}
	k := strings.TrimSpace(line)
	if k == "" {
		return "", usagef("--key-stdin: stdin held no key")
	}
	return k, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// workerCmd runs `gantry worker list ENDPOINT` and `gantry worker logs ENDPOINT WORKER [-f]`.
func (a *app) workerCmd(ctx context.Context, args []string) error {
	sub, args, err := a.subcommand("worker", args, "list", "logs")
	if err != nil {
		return err
	}
	usage := "gantry worker list ENDPOINT\n\nLists the endpoint's workers, and the ones that exited lately."
	if sub == "logs" {
		usage = "gantry worker logs ENDPOINT WORKER [-f] [--tail N]\n\nPrints a worker's output; -f follows it until the worker exits."
	}
	fs := a.flagSet("worker "+sub, usage)
	c := a.commonFlags(fs)
	var follow bool
	var tail int
	if sub == "logs" {
		fs.BoolVar(&follow, "f", false, "follow the log until the worker exits")
		fs.IntVar(&tail, "tail", 200, "print the last N lines first (1 to 100000)")
	}
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if sub == "list" {
		err = needArgs(fs, pos, "ENDPOINT")
	} else {
		err = needArgs(fs, pos, "ENDPOINT", "WORKER")
	}
	if err != nil {
		return err
	}
	cn, err := a.connect(c)
	if err != nil {
		return err
	}
	if sub == "list" {
		ws, err := answer[oas.WorkerListHeaders](cn.api.ListWorkers(ctx, oas.ListWorkersParams{EndpointId: pos[0]})).get(cn, "listing workers")
		if err != nil {
			return err
		}
		return cn.out.emit(&ws.Response, func(t *table) {
			t.row("ID", "STATUS", "POOL", "GPUS", "JOBS", "STARTED", "COLD START", "ERROR")
			for _, w := range ws.Response.Items {
				gpus := make([]string, len(w.Gpus))
				for i, g := range w.Gpus {
					gpus[i] = strconv.Itoa(g)
				}
				cold := ""
				if v, ok := w.ColdStartMs.Get(); ok {
					cold = ms(v)
				}
				t.row(w.ID, string(w.Status), w.Pool, strings.Join(gpus, ","), strconv.Itoa(w.Jobs.Or(0)), when(w.StartedAt), cold, w.Error.Or(""))
			}
		})
	}
	return a.logs(ctx, cn, pos[0], pos[1], tail, follow)
}

// logs prints a worker's log; with follow, it asks again each poll interval, prints the lines
// that are new, and returns once the worker has exited (its last lines printed).
func (a *app) logs(ctx context.Context, cn *conn, ep, worker string, tail int, follow bool) error {
	fetch := func(n int) ([]string, error) {
		l, err := answer[oas.GetWorkerLogsOKHeaders](cn.api.GetWorkerLogs(ctx, oas.GetWorkerLogsParams{EndpointId: ep, WorkerId: worker, Tail: oas.NewOptInt(n)})).get(cn, "reading the worker's log")
		if err != nil {
			return nil, err
		}
		var lines []string
		sc := bufio.NewScanner(l.Response.Data)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		return lines, sc.Err()
	}
	printed, err := fetch(tail)
	if err != nil {
		return err
	}
	for _, l := range printed {
		fmt.Fprintln(a.stdout, printable(l))
	}
	if !follow {
		return nil
	}
	poll := cmpOrDuration(a.poll, time.Second)
	const window = 1000 // lines asked for on each poll: the new ones since, and some overlap
	for {
		exited, err := a.workerExited(ctx, cn, ep, worker)
		if err != nil {
			return err
		}
		lines, err := fetch(window)
		if err != nil {
			return err
		}
		fresh := newLines(printed, lines)
		for _, l := range fresh {
			fmt.Fprintln(a.stdout, printable(l))
		}
		printed = append(printed, fresh...)
		if len(printed) > window {
			printed = printed[len(printed)-window:]
		}
		if exited {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

func cmpOrDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// workerExited reports whether the worker has exited (or is no longer listed).
func (a *app) workerExited(ctx context.Context, cn *conn, ep, worker string) (bool, error) {
	ws, err := answer[oas.WorkerListHeaders](cn.api.ListWorkers(ctx, oas.ListWorkersParams{EndpointId: ep})).get(cn, "listing workers")
	if err != nil {
		return false, err
	}
	i := slices.IndexFunc(ws.Response.Items, func(w oas.WorkerInfo) bool { return w.ID == worker })
	return i < 0 || ws.Response.Items[i].Status == oas.WorkerInfoStatusEXITED, nil
}

// newLines returns the lines of cur (a log's last lines now) after the ones already printed:
// cur's first lines that repeat the end of printed are skipped.
func newLines(printed, cur []string) []string {
	for k := min(len(printed), len(cur)); k > 0; k-- {
		if slices.Equal(printed[len(printed)-k:], cur[:k]) {
			return cur[k:]
		}
	}
	if len(printed) > 0 && len(cur) > 0 && len(cur) < len(printed) {
		return nil // the log is shorter than what was printed and shares no end with it: nothing new
	}
	return cur
}

// keyCmd runs `gantry key create|list|revoke` (and its alias `gantry keys`): over the API, or
// with --data on the server's data directory (the offline bootstrap of the first key), or with
// --store (or $GANTRY_STORE) on the PostgreSQL store replicas share.
func (a *app) keyCmd(ctx context.Context, args []string) error {
	sub, rest, err := a.subcommand("key", args, "create", "list", "revoke")
	if err != nil {
		return err
	}
	offline := a.getenv("GANTRY_STORE") != "" || slices.ContainsFunc(rest, func(s string) bool {
		for _, f := range []string{"data", "store"} {
			if s == "-"+f || s == "--"+f || strings.HasPrefix(s, "-"+f+"=") || strings.HasPrefix(s, "--"+f+"=") {
				return true
			}
		}
		return false
	})
	if offline {
		switch sub {
		case "create":
			return keysCreate(rest, a.stdout, a.stderr)
		case "list":
			return keysList(rest, a.stdout, a.stderr)
		}
		return keysRevoke(rest, a.stdout, a.stderr)
	}
	switch sub {
	case "create":
		return a.keyCreate(ctx, rest)
	case "list":
		fs := a.flagSet("key list", "gantry key list [--data DIR]\n\nLists your user's keys (with --data: every key of that data directory).")
		c := a.commonFlags(fs)
		offlineFlag(fs)
		pos, err := parseFlags(fs, rest)
		if err != nil {
			return err
		}
		if err := needArgs(fs, pos); err != nil {
			return err
		}
		cn, err := a.connect(c)
		if err != nil {
			return err
		}
		ks, err := answer[oas.KeyListHeaders](cn.api.ListKeys(ctx)).get(cn, "listing keys")
		if err != nil {
			return err
		}
		return cn.out.emit(&ks.Response, func(t *table) {
			t.row("ID", "USER", "SCOPE", "ENDPOINTS", "CREATED", "EXPIRES")
			for _, k := range ks.Response.Items {
				expires := "never"
				if e, ok := k.ExpiresAt.Get(); ok {
					expires = when(e)
				}
				t.row(k.ID, k.User, string(k.Scope), strings.Join(k.Endpoints, ","), when(k.CreatedAt), expires)
			}
		})
	}
	fs := a.flagSet("key revoke", "gantry key revoke KEY_ID [--data DIR]\n\nRevokes one of your user's keys, and the keys made with it; servers refuse them within 10 s.")
	c := a.commonFlags(fs)
	offlineFlag(fs)
	pos, err := parseFlags(fs, rest)
	if err != nil {
		return err
	}
	if err := needArgs(fs, pos, "KEY_ID"); err != nil {
		return err
	}
	cn, err := a.connect(c)
	if err != nil {
		return err
	}
	if _, err := answer[oas.DeleteKeyNoContent](cn.api.DeleteKey(ctx, oas.DeleteKeyParams{KeyId: pos[0]})).get(cn, "revoking the key"); err != nil {
		return err
	}
	if cn.out.format == "table" {
		_, err := fmt.Fprintf(a.stdout, "Revoked key %s and any keys made with it; servers refuse them within 10 s.\n", pos[0])
		return err
	}
	return cn.out.raw([]byte(fmt.Sprintf(`{"id":%q,"revoked":true}`, pos[0])))
}

// offlineFlag documents --data and --store in the help of the key commands over the API;
// keyCmd sends a command line with either to the offline commands before any flag is parsed.
func offlineFlag(fs *flag.FlagSet) {
	fs.String("data", "", "work offline on this server data directory instead of over the API (the first key of a fresh server)")
	fs.String("store", "", "work offline on this PostgreSQL store (postgres://...) instead of over the API (default $GANTRY_STORE)")
}

// keyCreate issues a key for the caller's own user over the API.
func (a *app) keyCreate(ctx context.Context, args []string) error {
	fs := a.flagSet("key create", "gantry key create [--scope all|read|jobs] [--endpoint ID]... [--expires 720h] [--quota-minute N]...\n\n"+
		"Issues a key for your own user (it needs a key of scope all) and prints it as the last line;\n"+
		"it is shown once. The quota flags may only lower your user's quota. With --data DIR --user NAME\n"+
		"it issues a key offline on the server's data directory instead (gantry key create --data DIR --help).")
	c := a.commonFlags(fs)
	scope := fs.String("scope", "all", "what the key may do: all, read (reads only) or jobs (job operations only)")
	var endpoints stringList
	fs.Var(&endpoints, "endpoint", "with --scope jobs: an endpoint (or model) id the key may use (repeatable; none = all)")
	expires := fs.Duration("expires", 0, "the key's lifetime, e.g. 720h (0 = never expires)")
	var qMinute, qHour, qDay quotaFlag
	fs.Var(&qMinute, "quota-minute", "lower your user's requests-per-minute quota to `number`")
	fs.Var(&qHour, "quota-hour", "lower your user's requests-per-hour quota to `number`")
	fs.Var(&qDay, "quota-day", "lower your user's requests-per-day quota to `number`")
	user := fs.String("user", "", "only with --data: the user the key is for")
	offlineFlag(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := needArgs(fs, pos); err != nil {
		return err
	}
	if *user != "" {
		return usagef("--user needs --data: over the API a key is always for your own user")
	}
	if *expires < 0 || (*expires > 0 && *expires < time.Second) {
		return usagef("--expires %v: want at least 1s, or 0 for never", *expires)
	}
	req := &oas.CreateKeyRequest{Scope: oas.NewOptKeyScope(oas.KeyScope(*scope)), Endpoints: endpoints}
	if *expires > 0 {
		req.ExpiresIn = oas.NewOptInt64(int64(expires.Seconds()))
	}
	if qMinute.set || qHour.set || qDay.set {
		var q oas.KeyQuota
		for _, f := range []struct {
			flag *quotaFlag
			dst  *oas.OptInt
		}{{&qMinute, &q.Minute}, {&qHour, &q.Hour}, {&qDay, &q.Day}} {
			if f.flag.set {
				*f.dst = oas.NewOptInt(f.flag.n)
			}
		}
		req.Quota = oas.NewOptKeyQuota(q)
	}
	cn, err := a.connect(c)
	if err != nil {
		return err
	}
	k, err := answer[oas.CreatedKeyHeaders](cn.api.CreateKey(ctx, req)).get(cn, "creating the key")
	if err != nil {
		return err
	}
	if cn.out.format != "table" {
		return cn.out.emit(&k.Response, nil)
	}
	_, err = fmt.Fprintf(a.stdout, "Created key %s for %s (scope %s). It is shown once; keep it safe:\n%s\n", k.Response.ID, k.Response.User, k.Response.Scope, k.Response.Secret)
	return err
}

// usageCmd runs `gantry usage`: the caller's usage of ready-made models, and its totals.
func (a *app) usageCmd(ctx context.Context, args []string) error {
	fs := a.flagSet("usage", "gantry usage [--model ID] [--from DATE] [--to DATE] [--limit N] [--cursor C]\n\nYour usage of ready-made models, one record per completed job, with totals.")
	c := a.commonFlags(fs)
	model := fs.String("model", "", "only this model's usage")
	from := fs.String("from", "", "completed at or after (RFC 3339, or YYYY-MM-DD)")
	to := fs.String("to", "", "completed before (RFC 3339, or YYYY-MM-DD for the end of that day)")
	limit := fs.Int("limit", 100, "records per page (1 to 1000)")
	cursor := fs.String("cursor", "", "the next page's cursor")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := needArgs(fs, pos); err != nil {
		return err
	}
	cn, err := a.connect(c)
	if err != nil {
		return err
	}
	u, err := answer[oas.UsageReportHeaders](cn.api.GetUsage(ctx, oas.GetUsageParams{Model: optString(*model), From: optString(*from),
		To: optString(*to), Limit: oas.NewOptInt(*limit), Cursor: optString(*cursor)})).get(cn, "reading usage")
	if err != nil {
		return err
	}
	r := &u.Response
	if err := cn.out.emit(r, func(t *table) {
		t.row("JOB", "COMPLETED", "MODEL", "UNITS", "UNIT", "COST")
		for _, it := range r.Items {
			t.row(it.JobId, when(it.CompletedAt), it.Model, it.Units, it.Unit, it.Cost+" "+string(it.Currency))
		}
		// The totals in the same columns: one row per model (over every record the filters
		// select, not only this page), and the sum when there are several models.
		for _, tot := range r.Totals {
			t.row("TOTAL", plural(tot.Jobs, "job"), tot.Model, tot.Units, tot.Unit, tot.Cost+" "+string(r.Currency))
		}
		if len(r.Totals) != 1 {
			t.row("TOTAL", "", "all models", "", "", r.Cost+" "+string(r.Currency))
		}
	}); err != nil {
		return err
	}
	if next, ok := r.NextCursor.Get(); ok && cn.out.format == "table" {
		fmt.Fprintf(a.stderr, "More records: gantry usage --cursor %s\n", next)
	}
	return nil
}

// modelCmd runs `gantry model list`.
func (a *app) modelCmd(ctx context.Context, args []string) error {
	sub, args, err := a.subcommand("model", args, "list")
	if err != nil {
		return err
	}
	fs := a.flagSet("model "+sub, "gantry model list\n\nThe ready-made models: run one with gantry run MODEL_ID --input '{...}'.")
	c := a.commonFlags(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := needArgs(fs, pos); err != nil {
		return err
	}
	cn, err := a.connect(c)
	if err != nil {
		return err
	}
	ms, err := answer[oas.ModelListHeaders](cn.api.ListModels(ctx)).get(cn, "listing models")
	if err != nil {
		return err
	}
	return cn.out.emit(&ms.Response, func(t *table) {
		t.row("ID", "TYPE", "UNIT", "PRICE", "NAME")
		for _, m := range ms.Response.Items {
			t.row(m.ID, string(m.Type), m.Unit.ID, m.Price.PerUnit+" "+string(m.Price.Currency), m.Name)
		}
	})
}

// completionCmd prints a shell completion script: gantry completion bash|zsh|fish.
func (a *app) completionCmd(args []string) error {
	if len(args) == 1 && isHelp(args[0]) {
		fmt.Fprint(a.stdout, groupHelp("completion"))
		return flag.ErrHelp
	}
	if len(args) != 1 {
		fmt.Fprint(a.stderr, groupHelp("completion"))
		return usagef("gantry completion takes a shell: bash, zsh or fish (e.g. source <(gantry completion bash))")
	}
	script, ok := completions[args[0]]
	if !ok {
		return usagef("gantry completion %q: want bash, zsh or fish", args[0])
	}
	_, err := io.WriteString(a.stdout, script)
	return err
}

// commandTree is every command and its subcommands, for completion.
var commandTree = [][2]string{
	{"serve", ""}, {"login", ""}, {"run", ""}, {"usage", ""}, {"version", ""}, {"completion", "bash zsh fish"},
	{"endpoint", "create list get update delete"}, {"template", "create list get update delete"}, {"volume", "create list get resize delete"},
	{"job", "status cancel retry stream list"}, {"worker", "list logs"}, {"key", "create list revoke"},
	{"keys", "create list revoke"}, {"model", "list"}, {"catalog", "gpus templates cpus"},
}

var completions = func() map[string]string {
	var top []string
	var bashCases, zshCases, fish strings.Builder
	for _, c := range commandTree {
		top = append(top, c[0])
		if c[1] != "" {
			fmt.Fprintf(&bashCases, "    %s) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", c[0], c[1])
			fmt.Fprintf(&zshCases, "    %s) compadd %s ;;\n", c[0], c[1])
			fmt.Fprintf(&fish, "complete -c gantry -n '__fish_seen_subcommand_from %s' -f -a %q\n", c[0], c[1])
		}
	}
	all := strings.Join(top, " ")
	return map[string]string{
		"bash": "# gantry completion for bash: source <(gantry completion bash)\n_gantry() {\n  local cur=${COMP_WORDS[COMP_CWORD]}\n" +
			"  if [ \"$COMP_CWORD\" -eq 1 ]; then COMPREPLY=($(compgen -W \"" + all + "\" -- \"$cur\")); return; fi\n" +
			"  [ \"$COMP_CWORD\" -eq 2 ] || return\n  case ${COMP_WORDS[1]} in\n" + bashCases.String() + "  esac\n}\ncomplete -F _gantry gantry\n",
		"zsh": "#compdef gantry\n# gantry completion for zsh: source <(gantry completion zsh)\n_gantry() {\n" +
			"  if (( CURRENT == 2 )); then compadd " + all + "; return; fi\n  (( CURRENT == 3 )) || return\n  case ${words[2]} in\n" + zshCases.String() + "  esac\n}\ncompdef _gantry gantry\n",
		"fish": "# gantry completion for fish: gantry completion fish | source\ncomplete -c gantry -f\n" +
			"complete -c gantry -n '__fish_use_subcommand' -a " + fmt.Sprintf("%q", all) + "\n" + fish.String(),
	}
}()

var errNoCommand = errors.New("no command given")

// plural is "1 job", "3 jobs".
func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.FormatInt(n, 10) + " " + what + "s"
}
