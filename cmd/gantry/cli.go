package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// quotaFlag is a requests-per-window flag that knows whether it was given: unset keeps the
// configured (or default) quota, and a negative number is refused.
type quotaFlag struct {
	n   int
	set bool
}

func (q *quotaFlag) String() string {
	if q == nil || !q.set {
		return ""
	}
	return strconv.Itoa(q.n)
}

func (q *quotaFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not a whole number")
	}
	if n < 0 {
		return errors.New("negative: give a number of requests, or 0 for unlimited")
	}
	q.n, q.set = n, true
	return nil
}

// apply sets *dst to the flag's value when it was given.
func (q *quotaFlag) apply(dst *int) {
	if q.set {
		*dst = q.n
	}
}

// printVersion writes `gantry version`: the module version, the VCS revision the binary was
// built from, and the Go version.
func printVersion(w io.Writer) {
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(w, versionLine(info))
}

func versionLine(info *debug.BuildInfo) string {
	if info == nil {
		return "gantry (no build information) " + runtime.Version()
	}
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, at, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	line := "gantry " + version
	if rev != "" {
		line += fmt.Sprintf(" (revision %s", rev)
		if at != "" {
			line += " of " + at
		}
		line += modified + ")"
	}
	return line + " " + cmp.Or(info.GoVersion, runtime.Version())
}

// invokedAs is how a user runs this binary again, for hints: `go run ./cmd/gantry` when it
// was built by go run (its executable lies in a go-build directory), else the name it was
// invoked by.
func invokedAs(arg0, exe string) string {
	if dir := filepath.ToSlash(filepath.Dir(exe)); filepath.Base(dir) == "exe" && strings.Contains(dir, "/go-build") {
		return "go run ./cmd/gantry"
	}
	if arg0 == "" {
		return "gantry"
	}
	return shellQuote(arg0)
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// startupHint is the line `gantry serve` prints on how to get an API key and log in: the key
// offline on the data directory, or, when the server runs on a PostgreSQL store (where --data
// holds no keys and is refused), on that store, its password replaced by a placeholder. Both
// commands call the binary the one way self says (invokedAs), and the login names base, the
// address the server listens on.
func startupHint(self, base, data, store string) string {
	where := "--data " + shellQuote(data)
	if store != "" {
		where = "--store " + shellQuote(storePlaceholder(store))
	}
	return fmt.Sprintf("Get an API key:  %s key create %s --user alice\nThen log in:     %s login --url %s --key-stdin   (and paste the key)", self, where, self, base)
}

// storePlaceholder is a PostgreSQL URL fit to print: its password (in the user part or a
// password= parameter) replaced by PASSWORD. A URL that does not parse is replaced whole.
func storePlaceholder(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "postgres://USER:PASSWORD@HOST:5432/DATABASE"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "PASSWORD")
		}
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "PASSWORD")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// optDuration is a duration flag that may be left unset (nil).
type optDuration struct{ d *time.Duration }

func (o *optDuration) String() string {
	if o == nil || o.d == nil {
		return ""
	}
	return o.d.String()
}

func (o *optDuration) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	if d < 0 {
		return fmt.Errorf("%v must not be negative", d)
	}
	o.d = &d
	return nil
}

// or is the flag's value when set, else def.
func (o *optDuration) or(def *time.Duration) *time.Duration {
	if o.d != nil {
		return o.d
	}
	return def
}
