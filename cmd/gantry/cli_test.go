package main

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestCLIHelpVersionAndFlags runs the binary: --help prints usage and exits 0 for every
// command, no default prints as -1, `gantry version` prints the version, and a usage error
// (a negative quota flag, a missing argument) exits 1 naming what is wrong.
func TestCLIHelpVersionAndFlags(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	home := t.TempDir()
	for _, tc := range []struct {
		args     []string
		wantCode int
		want     string
	}{
		{[]string{"serve", "--help"}, 0, "Usage: gantry serve"},
		{[]string{"serve", "-h"}, 0, "-quota-minute number"},
		{[]string{"keys", "create", "--help"}, 0, "Usage: gantry key create"},
		{[]string{"keys", "create", "--data", "x", "--help"}, 0, "Usage: gantry keys create"},
		{[]string{"keys", "list", "--help"}, 0, "-data"},
		{[]string{"keys", "revoke", "-h"}, 0, "-data"},
		{[]string{"worker", "--help"}, 0, "Usage: gantry worker"},
		{[]string{"endpoint", "--help"}, 0, "  delete ENDPOINT_ID"},
		{[]string{"completion", "--help"}, 0, "  fish"},
		{[]string{"catalog", "-h"}, 0, "  gpus"},
		{[]string{"--help"}, 0, "gantry version"},
		{[]string{"version"}, 0, "gantry "},
		{[]string{"version"}, 0, runtime.Version()},
		{[]string{"serve", "--quota-minute", "-1", "--config", "/nonexistent/gantry.yaml"}, 1, `invalid value "-1" for flag -quota-minute: negative`},
		{[]string{"serve", "--quota-day", "many", "--config", "/nonexistent/gantry.yaml"}, 1, `invalid value "many" for flag -quota-day: not a whole number`},
		{[]string{"keys", "create", "--data", "/nonexistent/data", "--user", "a", "--quota-hour", "-5"}, 1, `invalid value "-5" for flag -quota-hour: negative`},
		{[]string{"nonsense"}, 1, `unknown command "nonsense"`},
		{[]string{"job", "status"}, 1, "missing ENDPOINT and JOB_ID"},
		{[]string{"endpoint", "list"}, 1, "not logged in"},
		{[]string{"run", "--help"}, 0, "Usage: gantry run ENDPOINT"},
		{[]string{"worker", "logs", "--help"}, 0, "-f	follow"},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = append(os.Environ(), "HOME="+home, "GANTRY_URL=", "GANTRY_KEY=", "GANTRY_CONFIG=", "XDG_CONFIG_HOME=") // no saved login
		out, err := cmd.CombinedOutput()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.wantCode || !strings.Contains(string(out), tc.want) {
			t.Errorf("gantry %v: exit %d, output:\n%s\nwant exit %d and %q", tc.args, code, out, tc.wantCode, tc.want)
		}
		if strings.Contains(string(out), "(default -1)") {
			t.Errorf("gantry %v prints a default of -1:\n%s", tc.args, out)
		}
	}
}

func TestVersionLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{nil, "gantry (no build information) " + runtime.Version()},
		{&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v1.2.3"}}, "gantry v1.2.3 go1.26.1"},
		{&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "17b0e36"}, {Key: "vcs.time", Value: "2026-11-23T09:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			"gantry (devel) (revision 17b0e36 of 2026-11-23T09:00:00Z, modified) go1.26.1"},
	} {
		if got := versionLine(tc.info); got != tc.want {
			t.Errorf("versionLine(%+v) = %q; want %q", tc.info, got, tc.want)
		}
	}
}

func TestInvokedAs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ arg0, exe, want string }{
		{"/tmp/go-build1234/b001/exe/gantry", "/tmp/go-build1234/b001/exe/gantry", "go run ./cmd/gantry"},
		{"./gantry", "/home/me/gantry/gantry", "./gantry"},
		{"gantry", "/usr/local/bin/gantry", "gantry"},
		{"/opt/my tools/gantry", "/opt/my tools/gantry", "'/opt/my tools/gantry'"},
		{"", "/usr/local/bin/gantry", "gantry"},
	} {
		if got := invokedAs(tc.arg0, tc.exe); got != tc.want {
			t.Errorf("invokedAs(%q, %q) = %q; want %q", tc.arg0, tc.exe, got, tc.want)
		}
	}
}
