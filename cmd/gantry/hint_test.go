package main

import (
	"strings"
	"testing"
)

// TestStartupHint: on the embedded store the banner suggests key create --data; on a
// PostgreSQL store (where --data is refused) it suggests --store with the URL, its password
// replaced by a placeholder; and it suggests reading the key from stdin at login. Both
// commands call the binary one way, the way it was invoked, and the login names the address.
func TestStartupHint(t *testing.T) {
	t.Parallel()
	if h := startupHint("gantry", "http://127.0.0.1:8080", "/srv/gantry data", ""); !strings.Contains(h, " key create --data '/srv/gantry data' --user alice") ||
		!strings.Contains(h, "gantry login --url http://127.0.0.1:8080 --key-stdin") {
		t.Errorf("embedded store: %q", h)
	}
	for _, self := range []string{"go run ./cmd/gantry", "bin/gantry"} {
		h := startupHint(self, "http://127.0.0.1:8080", "./gantry-data", "")
		if strings.Count(h, self+" ") != 2 || strings.Contains(strings.ReplaceAll(h, self, ""), "gantry ") {
			t.Errorf("invoked as %s: %q; want both commands to call it so, and no other way", self, h)
		}
	}
	for store, want := range map[string]string{
		"postgres://gantry:s3cret@db:5432/gantry?sslmode=disable": "--store 'postgres://gantry:PASSWORD@db:5432/gantry?sslmode=disable' --user alice",
		"postgresql://gantry@db/gantry":                           "--store postgresql://gantry@db/gantry --user alice",
		"postgres://db/gantry?user=gantry&password=s3cret":        "--store 'postgres://db/gantry?password=PASSWORD&user=gantry' --user alice",
		"postgres://gantry:p%40ss%2Fw@[fd00::5]:5432/gantry":      "--store 'postgres://gantry:PASSWORD@[fd00::5]:5432/gantry' --user alice",
		"postgres://gantry:bad%zz@db/gantry":                      "--store postgres://USER:PASSWORD@HOST:5432/DATABASE --user alice",
	} {
		h := startupHint("gantry", "http://127.0.0.1:8080", "./gantry-data", store)
		if !strings.Contains(h, " key create "+want) || strings.Contains(h, "--data") || strings.Contains(h, "s3cret") || strings.Contains(h, "p%40ss") {
			t.Errorf("store %s: %q; want %q in it, no --data, no password", store, h, want)
		}
	}
}
