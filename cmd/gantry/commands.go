package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
)

// This file is gantry's table of commands: one entry per command gives its dispatch
// (app.run), a group's help (gantry GROUP --help) and its shell completion, so that adding a
// command is one entry here plus the file that runs it. call folds the steps an API command
// repeats (flags, arguments, connection) into one.

// command is one of gantry's commands.
type command struct {
	// names are the command's name, then the aliases completion offers too ("key", "keys").
	names []string
	// also are names it answers to that completion does not offer ("endpoints", "--version").
	also []string
	// subs are a group's subcommands, for its help and completion; nil for a single command.
	subs []subcmd
	// run runs the command with the arguments after its name.
	run func(a *app, ctx context.Context, args []string) error
}

// commands is every command, in the order completion offers them. It is filled in by init:
// the commands print their group's help, which reads this table, so a package-level
// initializer would refer to itself.
var commands []command

func init() {
	commands = []command{
		{names: []string{"serve"}, run: func(a *app, _ context.Context, args []string) error { return serve(args, a.stdout, a.stderr) }},
		{names: []string{"login"}, run: (*app).loginCmd},
		{names: []string{"run"}, run: (*app).runCmd},
		{names: []string{"usage"}, run: (*app).usageCmd},
		{names: []string{"version"}, also: []string{"--version"}, run: func(a *app, _ context.Context, _ []string) error {
			printVersion(a.stdout)
			return nil
		}},
		{names: []string{"completion"}, run: func(a *app, _ context.Context, args []string) error { return a.completionCmd(args) }, subs: []subcmd{
			{"bash", "source <(gantry completion bash)"},
			{"zsh", "source <(gantry completion zsh)"},
			{"fish", "gantry completion fish | source"},
		}},
		{names: []string{"endpoint"}, also: []string{"endpoints"}, run: (*app).endpointCmd, subs: []subcmd{
			{"create --name NAME --image IMAGE --pool POOL [flags] | -f FILE", "create an endpoint"},
			{"list [--limit N]", "list your endpoints"},
			{"get ENDPOINT_ID", "show one endpoint"},
			{"update ENDPOINT_ID [flags] | -f FILE", "change an endpoint's fields"},
			{"delete ENDPOINT_ID", "delete an endpoint (its queued jobs are cancelled)"},
		}},
		{names: []string{"template"}, also: []string{"templates"}, run: (*app).templateCmd, subs: []subcmd{
			{"create --name NAME --image IMAGE [flags] | -f FILE", "create a template of your own"},
			{"list [--public=false]", "list your templates and the public ones"},
			{"get TEMPLATE_ID", "show one template (yours or a public one)"},
			{"update TEMPLATE_ID [flags] | -f FILE", "change one of your templates"},
			{"delete TEMPLATE_ID", "delete one of your templates"},
		}},
		{names: []string{"volume"}, also: []string{"volumes"}, run: (*app).volumeCmd, subs: []subcmd{
			{"create --name NAME --size GB --data-center DC [--type T]", "create a network volume of yours"},
			{"list", "list your volumes and the operator's"},
			{"get VOLUME_ID", "show one volume, with the bytes it holds where its storage can tell"},
			{"resize VOLUME_ID --size GB [--name NAME]", "grow a volume (it never shrinks), or rename it"},
			{"delete VOLUME_ID [--yes]", "delete a volume and its data (asks first, unless --yes)"},
		}},
		{names: []string{"job"}, also: []string{"jobs"}, run: (*app).jobCmd, subs: []subcmd{
			{"status ENDPOINT JOB_ID", "show a job: its state, times, output or error, cost"},
			{"cancel ENDPOINT JOB_ID", "cancel a queued or running job"},
			{"retry ENDPOINT JOB_ID", "queue a failed, timed-out or cancelled job again"},
			{"stream ENDPOINT JOB_ID", "print the job's stream parts not yet handed out, until it ends"},
			{"list ENDPOINT [--status S]... [--limit N]", "list an endpoint's jobs, newest first"},
		}},
		{names: []string{"worker"}, run: (*app).workerGroup, subs: []subcmd{
			{"list ENDPOINT", "list an endpoint's workers, and the ones that exited lately"},
			{"logs ENDPOINT WORKER [-f] [--tail N]", "print a worker's log; -f follows it"},
			{"NAME", "run a built-in worker (the process pool starts these; see below)"},
		}},
		{names: []string{"key", "keys"}, run: (*app).keyCmd, subs: []subcmd{
			{"create [--scope all|read|jobs] [--expires D]", "issue an API key for your user (--data DIR --user NAME: offline)"},
			{"list", "list your user's keys (--data DIR: every key, offline)"},
			{"revoke KEY_ID", "revoke a key"},
		}},
		{names: []string{"model"}, also: []string{"models"}, run: (*app).modelCmd, subs: []subcmd{
			{"list", "list the ready-made models, their units and prices"},
		}},
		{names: []string{"catalog"}, run: (*app).catalogCmd, subs: []subcmd{
			{"gpus [--availability]", "the GPU types of each pool (the ids to give endpoint create --pool)"},
			{"templates", "the public templates (gantry template list shows them too)"},
			{"cpus", "the CPU flavors"},
		}},
		{also: []string{"help", "-h", "--help"}, run: func(a *app, _ context.Context, _ []string) error {
			fmt.Fprint(a.stdout, usage)
			return nil
		}},
	}
}

// lookup returns the command that answers to name.
func lookup(name string) (command, bool) {
	for _, c := range commands {
		if slices.Contains(c.names, name) || slices.Contains(c.also, name) {
			return c, true
		}
	}
	return command{}, false
}

// subsOf returns a command group's subcommands.
func subsOf(group string) []subcmd {
	c, _ := lookup(group)
	return c.subs
}

// workerGroup runs `gantry worker`: list and logs ask the API (workerCmd); any other name
// runs a built-in worker.
func (a *app) workerGroup(ctx context.Context, args []string) error {
	if len(args) > 0 && (args[0] == "list" || args[0] == "logs") {
		return a.workerCmd(ctx, args)
	}
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(a.stdout, groupHelp("worker"))
		return flag.ErrHelp
	}
	return runWorker(args, a.stderr)
}

// call runs the steps every command over the API repeats: it parses args with the common
// flags and those flags adds, checks the positional arguments against argNames, connects,
// and runs do with the connection (whose printer prints the output) and the arguments.
func (a *app) call(name, usage string, args []string, argNames []string, flags func(fs *flag.FlagSet),
	do func(cn *conn, pos []string) error) error {
	fs := a.flagSet(name, usage)
	c := a.commonFlags(fs)
	if flags != nil {
		flags(fs)
	}
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := needArgs(fs, pos, argNames...); err != nil {
		return err
	}
	cn, err := a.connect(c)
	if err != nil {
		return err
	}
	return do(cn, pos)
}

// completionTree is every command offered for completion with its subcommands (their first
// words, placeholders such as worker NAME left out).
func completionTree() [][2]string {
	var tree [][2]string
	for _, c := range commands {
		var subs []string
		for _, s := range c.subs {
			if n := s.name(); n == strings.ToLower(n) {
				subs = append(subs, n)
			}
		}
		for _, n := range c.names {
			tree = append(tree, [2]string{n, strings.Join(subs, " ")})
		}
	}
	return tree
}
