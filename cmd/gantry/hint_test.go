package main

import (
	"strings"
	"testing"
)

// TestStartupHint: on the embedded store the banner suggests key create --data; on a
// PostgreSQL store (where --data is refused) it suggests --store with the URL, its password
// replaced by a placeholder; and it suggests reading the key from stdin at login.
func TestStartupHint(t *testing.T) {
	t.Parallel()
	if h := startupHint("/srv/gantry data", ""); !strings.Contains(h, " key create --data '/srv/gantry data' --user alice") || !strings.Contains(h, "--key-stdin") {
		t.Errorf("embedded store: %q", h)
	}
	for store, want := range map[string]string{
		"postgres://gantry:s3cret@db:5432/gantry?sslmode=disable": "--store 'postgres://gantry:PASSWORD@db:5432/gantry?sslmode=disable' --user alice",
		"postgresql://gantry@db/gantry":                           "--store postgresql://gantry@db/gantry --user alice",
		"postgres://db/gantry?user=gantry&password=s3cret":        "--store 'postgres://db/gantry?password=PASSWORD&user=gantry' --user alice",
		"postgres://gantry:p%40ss%2Fw@[fd00::5]:5432/gantry":      "--store 'postgres://gantry:PASSWORD@[fd00::5]:5432/gantry' --user alice",
		"postgres://gantry:bad%zz@db/gantry":                      "--store postgres://USER:PASSWORD@HOST:5432/DATABASE --user alice",
	} {
		h := startupHint("./gantry-data", store)
		if !strings.Contains(h, " key create "+want) || strings.Contains(h, "--data") || strings.Contains(h, "s3cret") || strings.Contains(h, "p%40ss") {
			t.Errorf("store %s: %q; want %q in it, no --data, no password", store, h, want)
		}
	}
}
