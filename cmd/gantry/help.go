package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// subcmd is one subcommand of a command group, for the group's help: its name and
// arguments, and what it does.
type subcmd struct{ synopsis, what string }

// name is the subcommand's first word.
func (s subcmd) name() string {
	n, _, _ := strings.Cut(s.synopsis, " ")
	return n
}

// groupHelp is `gantry GROUP --help`: the group's subcommands, a line each.
func groupHelp(group string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: gantry %s SUBCOMMAND [ARGS] [flags]\n\nSubcommands:\n", group)
	width := 0
	for _, s := range subsOf(group) {
		width = max(width, len(s.synopsis))
	}
	for _, s := range subsOf(group) {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, s.synopsis, s.what)
	}
	switch group {
	case "worker":
		fmt.Fprintf(&b, "\nBuilt-in workers (gantry worker NAME; images gantry/NAME map to them): %s.\n"+
			"A built-in worker reads RUNPOD_WEBHOOK_GET_JOB, RUNPOD_WEBHOOK_POST_OUTPUT,\n"+
			"RUNPOD_WEBHOOK_POST_STREAM, RUNPOD_WEBHOOK_PING, RUNPOD_AI_API_KEY, RUNPOD_POD_ID and\n"+
			"RUNPOD_PING_INTERVAL, as RunPod workers do.\n", strings.Join(builtinWorkerNames(), ", "))
	case "completion":
	default:
		fmt.Fprintf(&b, "\nEach subcommand takes --help: gantry %s %s --help.\n", group, subsOf(group)[0].name())
	}
	return b.String()
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// subcommand splits off args[0], one of the group's subcommands. --help (or no subcommand)
// prints the group's help: on stdout and flag.ErrHelp (exit 0) when asked for, else on stderr
// with a usage error.
func (a *app) subcommand(group string, args []string, subs ...string) (string, []string, error) {
	if len(args) > 0 {
		for _, s := range subs {
			if args[0] == s {
				return s, args[1:], nil
			}
		}
		if isHelp(args[0]) {
			fmt.Fprint(a.stdout, groupHelp(group))
			return "", nil, flag.ErrHelp
		}
		return "", nil, usagef("unknown %s subcommand %q (want %s; gantry %s --help lists them)", group, args[0], strings.Join(subs, ", "), group)
	}
	fmt.Fprint(a.stderr, groupHelp(group))
	return "", nil, usagef("gantry %s takes a subcommand: %s", group, strings.Join(subs, ", "))
}

// parseFlags parses args with fs, flags and positional arguments in any order, and returns
// the positional ones. A bad flag is a usage error of one line (parseQuiet).
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseQuiet(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// parseQuiet parses args with fs. --help prints fs.Usage and returns flag.ErrHelp; a bad flag
// prints nothing (the flag package would print the error and then the whole usage, and main
// the error again) and returns a usage error of one line that main prints once.
func parseQuiet(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	}
	cmd := strings.TrimPrefix(fs.Name(), "gantry ")
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		return usagef("%s: unknown flag --%s (gantry %s --help lists its flags)", cmd, name, cmd)
	}
	return &usageError{fmt.Errorf("%s: %w", cmd, err)}
}

// needArgs checks the positional arguments of fs's command against the names it takes, and
// says which are missing or left over.
func needArgs(fs *flag.FlagSet, pos []string, names ...string) error {
	cmd := strings.TrimPrefix(fs.Name(), "gantry ")
	takes := "it takes no arguments"
	if len(names) > 0 {
		takes = "usage: gantry " + cmd + " " + strings.Join(names, " ")
	}
	switch {
	case len(pos) < len(names):
		return usagef("%s: missing %s (%s)", cmd, strings.Join(names[len(pos):], " and "), takes)
	case len(pos) > len(names):
		extra := make([]string, len(pos)-len(names))
		for i, p := range pos[len(names):] {
			extra[i] = fmt.Sprintf("%q", p)
		}
		return usagef("%s: unexpected argument %s (%s)", cmd, strings.Join(extra, " "), takes)
	}
	return nil
}
