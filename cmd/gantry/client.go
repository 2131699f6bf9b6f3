package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gantryhq/gantry/oas"
)

// Exit statuses (docs/cli.md): 0 ok (and --help), 1 a usage error, 2 a failed call (or a job
// that ended FAILED, TIMED_OUT or CANCELLED under `gantry run`), 3 the server unreachable.
const (
	exitOK          = 0
	exitUsage       = 1
	exitFailed      = 2
	exitUnreachable = 3
)

// usageError is a command line the command cannot run: exit status 1.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usage error.
func usagef(format string, args ...any) error { return &usageError{fmt.Errorf(format, args...)} }

// unreachableError is a call that reached no server: exit status 3.
type unreachableError struct {
	url string
	err error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach the Gantry server at %s: %v", e.url, e.err)
}
func (e *unreachableError) Unwrap() error { return e.err }

// problemError is the server's problem+json answer to a call: exit status 2. main prints the
// detail and then each of its errors on a line of its own.
type problemError struct {
	op string
	p  oas.Problem
}

func (e *problemError) Error() string {
	msg := fmt.Sprintf("%s: %d %s: %s", e.op, e.p.Status, printable(e.p.Title), printable(e.p.Detail))
	for _, line := range e.p.Errors {
		if line != e.p.Detail {
			msg += "\n  " + printable(line)
		}
	}
	return msg
}

// exitCode is the process's exit status for run's error.
func exitCode(err error) int {
	var usage *usageError
	var unreachable *unreachableError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &usage):
		return exitUsage
	case errors.As(err, &unreachable):
		return exitUnreachable
	}
	return exitFailed
}

// app is one run of the CLI: its streams and environment, so that tests run it in process.
type app struct {
	stdout, stderr io.Writer
	stdin          io.Reader
	getenv         func(string) string
	// isTTY reports whether stderr is a terminal: `gantry run` redraws one progress line there,
	// and prints a line per change elsewhere.
	isTTY bool
	// poll is how often `worker logs -f` looks for new lines; 0 = 1 s.
	poll time.Duration
	// client makes the HTTP calls; nil = a client of its own.
	client *http.Client
}

// profile is a saved connection.
type profile struct {
	URL string `yaml:"url"`
	Key string `yaml:"key"`
	// Insecure lets the key go over plain http:// to this profile's URL although the host is
	// not a loopback one (gantry login --insecure saved it).
	Insecure bool `yaml:"insecure,omitempty"`
}

// cliConfig is ~/.config/gantry/config.yaml.
type cliConfig struct {
	Current  string             `yaml:"current,omitempty"`
	Profiles map[string]profile `yaml:"profiles"`
}

// configPath is where the login profiles live: $GANTRY_CONFIG, else
// $XDG_CONFIG_HOME/gantry/config.yaml, else ~/.config/gantry/config.yaml.
func (a *app) configPath() (string, error) {
	if p := a.getenv("GANTRY_CONFIG"); p != "" {
		return p, nil
	}
	if d := a.getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "gantry", "config.yaml"), nil
	}
	if h := a.getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "gantry", "config.yaml"), nil
	}
	return "", usagef("no home directory: set HOME or GANTRY_CONFIG")
}

func (a *app) loadConfig() (cliConfig, string, error) {
	path, err := a.configPath()
	if err != nil {
		return cliConfig{}, "", err
	}
	var c cliConfig
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return cliConfig{Profiles: map[string]profile{}}, path, nil
	case err != nil:
		return c, path, err
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return c, path, fmt.Errorf("%s: %w", path, err)
	}
	if c.Profiles == nil {
		c.Profiles = map[string]profile{}
	}
	return c, path, nil
}

// saveConfig writes the profiles readable by their owner only (they hold keys): a private
// temporary file renamed into place.
func saveConfig(path string, c cliConfig) error {
	b, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }() // no-op once renamed
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// common are the flags every client command takes.
type common struct {
	profile  string
	output   string
	insecure bool
}

func (a *app) commonFlags(fs *flag.FlagSet) *common {
	c := &common{}
	fs.StringVar(&c.profile, "profile", "", "the saved login to use (default: $GANTRY_PROFILE, else the one gantry login saved last)")
	fs.StringVar(&c.output, "o", "table", "output: table, json (the API's JSON), yaml, or id (the id alone, for scripts)")
	fs.StringVar(&c.output, "output", "table", "the same as -o")
	fs.BoolVar(&c.insecure, "insecure", false, insecureHelp)
	return c
}

// conn is a connection to a Gantry server through the generated client.
type conn struct {
	url string
	api *oas.Client
	out *printer
}

// keySource hands the client the API key for every kind of operation.
type keySource string

func (k keySource) BearerAuth(context.Context, oas.OperationName) (oas.BearerAuth, error) {
	return oas.BearerAuth{Token: string(k)}, nil
}
func (k keySource) JobKey(context.Context, oas.OperationName) (oas.JobKey, error) {
	return oas.JobKey{APIKey: string(k)}, nil
}
func (k keySource) WorkerToken(context.Context, oas.OperationName) (oas.WorkerToken, error) {
	return oas.WorkerToken{}, errors.New("the CLI has no worker token")
}

// connect resolves the server and key: $GANTRY_URL and $GANTRY_KEY override the profile
// (--profile, else $GANTRY_PROFILE, else the current one).
func (a *app) connect(c *common) (*conn, error) {
	out, err := a.printer(c.output)
	if err != nil {
		return nil, err
	}
	cfg, path, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	name := c.profile
	if name == "" {
		name = a.getenv("GANTRY_PROFILE")
	}
	p, found := cfg.Profiles[name]
	if name == "" {
		name = cfg.Current
		p = cfg.Profiles[name]
	} else if !found {
		return nil, usagef("no profile %q in %s (gantry login --profile %s --url URL --key KEY saves one)", name, path, name)
	}
	if u := a.getenv("GANTRY_URL"); u != "" && u != p.URL {
		p.URL = u
		p.Insecure = false // the profile's consent was for its own URL
	}
	if k := a.getenv("GANTRY_KEY"); k != "" {
		p.Key = k
	}
	if p.URL == "" || p.Key == "" {
		return nil, usagef("not logged in: run `gantry login --url URL --key KEY`, or set GANTRY_URL and GANTRY_KEY")
	}
	p.Insecure = p.Insecure || c.insecure || a.getenv("GANTRY_INSECURE") == "1"
	return a.dial(p, out)
}

// dial makes the client for p. It refuses, before any connection, to send the key in clear
// (plain http://) to a host that is not a loopback one, unless p.Insecure.
func (a *app) dial(p profile, out *printer) (*conn, error) {
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("server URL %q: want http://HOST:PORT or https://HOST", p.URL)
	}
	if u.Scheme == "http" && !p.Insecure && !isLoopbackHost(u.Hostname()) {
		return nil, usagef("refusing to send the API key in clear text to %s: it is a bearer credential, and plain http:// is readable on the way; use https://, or give --insecure (or GANTRY_INSECURE=1) if the network is trusted", u.Host)
	}
	hc := a.client
	if hc == nil {
		hc = &http.Client{}
	}
	client, err := oas.NewClient(p.URL, keySource(p.Key), oas.WithClient(warnings{hc, a.stderr}))
	if err != nil {
		return nil, err
	}
	return &conn{url: p.URL, api: client, out: out}, nil
}

// answer holds a generated client's answer until get turns it into T: answer[T](client
// call).get(conn, "what the call does").
func answer[T any, R any](res R, err error) answered[T] { return answered[T]{res: res, err: err} }

type answered[T any] struct {
	res any
	err error
}

// get returns the success answer, or the error to exit with: a problem answer, or an
// unreachable server.
func (r answered[T]) get(c *conn, op string) (*T, error) {
	if err := r.err; err != nil {
		var ne net.Error
		var ue *url.Error
		if errors.As(err, &ne) || errors.As(err, &ue) {
			return nil, &unreachableError{url: c.url, err: unwrapURL(err)}
		}
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if v, ok := r.res.(*T); ok {
		return v, nil
	}
	if p, ok := problemOf(r.res); ok {
		return nil, &problemError{op: op, p: p}
	}
	return nil, fmt.Errorf("%s: unexpected answer %T", op, r.res)
}

// unwrapURL drops url.Error's method and URL, which the unreachable error says already.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

var problemType = reflect.TypeFor[oas.Problem]()

// problemOf finds the problem in one of the generated error answers: a Problem under another
// name, a headers wrapper with a Problem Response, or ErrorStatusCode.
func problemOf(res any) (oas.Problem, bool) {
	v := reflect.ValueOf(res)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return oas.Problem{}, false
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return oas.Problem{}, false
	}
	if v.Type().ConvertibleTo(problemType) {
		return v.Convert(problemType).Interface().(oas.Problem), true
	}
	if f := v.FieldByName("Response"); f.IsValid() && f.Type() == problemType {
		return f.Interface().(oas.Problem), true
	}
	return oas.Problem{}, false
}

// insecureHelp documents --insecure.
const insecureHelp = "allow sending the key over plain http:// to a host that is not loopback (default $GANTRY_INSECURE=1; otherwise refused: the key is a bearer credential)"

// isLoopbackHost reports whether host (a URL's host name, without port or brackets) is
// localhost or a loopback address: 127.0.0.0/8 or ::1 (with a zone or IPv4-mapped too).
func isLoopbackHost(host string) bool {
	if h := strings.TrimSuffix(strings.ToLower(host), "."); h == "localhost" {
		return true
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && addr.WithZone("").Unmap().IsLoopback()
}
