package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// This file is `gantry completion`: the shell completion scripts.

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
	script, ok := completions()[args[0]]
	if !ok {
		return usagef("gantry completion %q: want bash, zsh or fish", args[0])
	}
	_, err := io.WriteString(a.stdout, script)
	return err
}

// completions returns the completion script of each shell, from the table of commands.
func completions() map[string]string {
	var top []string
	var bashCases, zshCases, fish strings.Builder
	for _, c := range completionTree() {
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
}
