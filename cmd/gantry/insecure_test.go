package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gantryhq/gantry/server"
)

// noDialRig is a CLI whose HTTP client connects nowhere: each dial is counted and fails, so
// that a test sees whether the CLI tried to reach a server without any traffic leaving.
func noDialRig(t *testing.T) (*rig, *atomic.Int32) {
	var dials atomic.Int32
	hc := &http.Client{Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			dials.Add(1)
			return nil, errors.New("test dialer: no connection is made")
		},
	}}
	return &rig{t: t, home: t.TempDir(), hc: hc}, &dials
}

// TestCLIRefusesKeyOverPlainHTTP: plain http:// to a host that is not loopback is refused
// (exit 1, before any dial) unless --insecure or GANTRY_INSECURE=1; https and loopback hosts
// go ahead (the test dialer then fails them: exit 3).
func TestCLIRefusesKeyOverPlainHTTP(t *testing.T) {
	t.Parallel()
	r, dials := noDialRig(t)
	env := func(u string, more ...string) map[string]string {
		m := map[string]string{"HOME": r.home, "GANTRY_URL": u, "GANTRY_KEY": "gk_test"}
		for i := 0; i+1 < len(more); i += 2 {
			m[more[i]] = more[i+1]
		}
		return m
	}
	for _, u := range []string{"http://192.0.2.1:1", "http://[2001:db8::1]:1", "http://gantry.example.invalid", "http://127.0.0.1.example.invalid:1", "http://localhostx:1"} {
		before := dials.Load()
		res := r.runWith(env(u), "", "endpoint", "list")
		if res.code != exitUsage || !strings.Contains(res.err, "refusing to send the API key in clear text") || !strings.Contains(res.err, "--insecure") {
			t.Errorf("%s: %v; want exit 1, refused, naming --insecure", u, res)
		}
		if n := dials.Load() - before; n != 0 {
			t.Errorf("%s: %d dial(s) before the refusal; want none", u, n)
		}
	}
	// login is refused the same way, and saves nothing.
	before := dials.Load()
	if res := r.runWith(map[string]string{"HOME": r.home}, "", "login", "--url", "http://192.0.2.1:1", "--key", "gk_test"); res.code != exitUsage || !strings.Contains(res.err, "clear text") {
		t.Errorf("login over plain http: %v; want exit 1, refused", res)
	}
	if dials.Load() != before {
		t.Errorf("login dialled before the refusal")
	}
	if _, err := os.Stat(filepath.Join(r.home, ".config", "gantry", "config.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused login wrote the config (%v)", err)
	}

	// Allowed: each of these reaches the dialer (which fails it: exit 3).
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"--insecure", env("http://192.0.2.1:1"), []string{"endpoint", "list", "--insecure"}},
		{"GANTRY_INSECURE=1", env("http://192.0.2.1:1", "GANTRY_INSECURE", "1"), []string{"endpoint", "list"}},
		{"https", env("https://192.0.2.1:1"), []string{"endpoint", "list"}},
		{"127.0.0.2", env("http://127.0.0.2:1"), []string{"endpoint", "list"}},
		{"::1", env("http://[::1]:1"), []string{"endpoint", "list"}},
		{"localhost", env("http://LocalHost:1"), []string{"endpoint", "list"}},
		{"login --insecure", map[string]string{"HOME": r.home}, []string{"login", "--url", "http://192.0.2.1:1", "--key", "gk_test", "--insecure"}},
	} {
		before := dials.Load()
		res := r.runWith(tc.env, "", tc.args...)
		if res.code != exitUnreachable || dials.Load() == before {
			t.Errorf("%s: %v (dials %d); want a dial and exit 3", tc.name, res, dials.Load()-before)
		}
	}
}

// TestCLIInsecureProfile: a profile saved with insecure: true goes to its own URL over plain
// http without --insecure; GANTRY_URL pointing elsewhere drops that consent.
func TestCLIInsecureProfile(t *testing.T) {
	t.Parallel()
	r, dials := noDialRig(t)
	path := filepath.Join(r.home, "config.yaml")
	if err := saveConfig(path, cliConfig{Current: "lan", Profiles: map[string]profile{
		"lan": {URL: "http://192.0.2.1:1", Key: "gk_test", Insecure: true},
	}}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HOME": r.home, "GANTRY_CONFIG": path}
	if res := r.runWith(env, "", "endpoint", "list"); res.code != exitUnreachable || dials.Load() != 1 {
		t.Errorf("insecure profile: %v (dials %d); want one dial and exit 3", res, dials.Load())
	}
	env["GANTRY_URL"] = "http://192.0.2.2:1"
	if res := r.runWith(env, "", "endpoint", "list"); res.code != exitUsage || dials.Load() != 1 {
		t.Errorf("GANTRY_URL over an insecure profile: %v (dials %d); want exit 1 and no dial", res, dials.Load())
	}
}

func TestIsLoopbackHost(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.255.0.9": true, "::1": true, "::ffff:127.0.0.1": true, "::1%lo": true,
		"localhost": true, "LOCALHOST": true, "localhost.": true,
		"128.0.0.1": false, "0.0.0.0": false, "::": false, "192.0.2.1": false, "10.0.0.1": false,
		"localhost.example": false, "127.0.0.1.nip.io": false, "": false,
	} {
		if got := isLoopbackHost(host); got != want {
			t.Errorf("isLoopbackHost(%q) = %v; want %v", host, got, want)
		}
	}
}

// TestCLILoginKeyFromStdin: --key-stdin and --key - read the key from stdin (its first
// line); --key still works; both at once, or an empty stdin, is a usage error.
func TestCLILoginKeyFromStdin(t *testing.T) {
	t.Parallel()
	r := newRig(t, server.Options{})
	home := map[string]string{"HOME": r.home}
	path := filepath.Join(r.home, ".config", "gantry", "config.yaml")
	for i, args := range [][]string{{"--key-stdin"}, {"--key", "-"}} {
		name := []string{"stdin", "dash"}[i]
		res := r.runWith(home, "  "+r.key+"\r\nignored\n", append([]string{"login", "--url", r.url, "--profile", name}, args...)...)
		if res.code != 0 {
			t.Fatalf("login %v: %v", args, res)
		}
		b, _ := os.ReadFile(path)
		if !strings.Contains(string(b), "key: "+r.key+"\n") {
			t.Errorf("login %v: config =\n%s; want the key from stdin", args, b)
		}
		if res := r.runWith(map[string]string{"HOME": r.home, "GANTRY_PROFILE": name}, "", "endpoint", "list"); res.code != 0 {
			t.Errorf("endpoint list with the profile from login %v: %v", args, res)
		}
	}
	if res := r.runWith(home, "gk_wrong\n", "login", "--url", r.url, "--key-stdin"); res.code != exitFailed || !strings.Contains(res.err, "401") {
		t.Errorf("a wrong key on stdin: %v; want exit 2 and the 401", res)
	}
	if res := r.runWith(home, r.key, "login", "--url", r.url, "--key", r.key, "--key-stdin"); res.code != exitUsage || !strings.Contains(res.err, "not both") {
		t.Errorf("--key and --key-stdin: %v; want exit 1", res)
	}
	if res := r.runWith(home, "\n", "login", "--url", r.url, "--key-stdin"); res.code != exitUsage || !strings.Contains(res.err, "stdin held no key") {
		t.Errorf("empty stdin: %v; want exit 1", res)
	}
	if res := r.runWith(home, "", "login", "--url", r.url, "--key", r.key); res.code != 0 {
		t.Errorf("login --key: %v", res)
	}
}
