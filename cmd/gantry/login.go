package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gantryhq/gantry/oas"
)

// This file is `gantry login`: it checks a key and saves the profile later commands use.

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
	p := profile{URL: strings.TrimRight(cmp.Or(*u, a.getenv("GANTRY_URL")), "/"), Key: cmp.Or(*key, a.getenv("GANTRY_KEY")),
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
