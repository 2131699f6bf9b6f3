package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/pgtest"
)

// TestKeysStore: the keys commands work on the PostgreSQL store that --store names (the one
// every replica reads), without a data directory; --endpoint ids are checked there; a bad URL
// is refused naming the flag's form.
func TestKeysStore(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	gantry := func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		err := run(args, &stdout, &stderr)
		return stdout.String() + stderr.String(), err
	}
	out, err := gantry("keys", "create", "--store", url, "--user", "alice")
	if err != nil || !strings.Contains(out, "Created key key_") {
		t.Fatalf("keys create --store = %v\n%s", err, out)
	}
	id := strings.Fields(out[strings.Index(out, "Created key ")+len("Created key "):])[0]
	out, err = gantry("keys", "list", "--store", url)
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, "alice") {
		t.Fatalf("keys list --store = %v\n%s\nwant %s of alice", err, out, id)
	}
	if out, err := gantry("keys", "create", "--store", url, "--user", "alice", "--scope", "jobs", "--endpoint", "nosuch"); err == nil || !strings.Contains(err.Error(), `no endpoint "nosuch"`) {
		t.Errorf("keys create --endpoint nosuch = %v\n%s; want an error naming the endpoint", err, out)
	}
	if out, err := gantry("keys", "revoke", "--store", url, id); err != nil || !strings.Contains(out, "every server refuses it") {
		t.Fatalf("keys revoke --store = %v\n%s", err, out)
	}
	if _, err := gantry("keys", "revoke", "--store", url, id); err == nil {
		t.Error("revoking twice succeeded; want an error")
	}
	if out, err := gantry("keys", "list", "--store", url); err != nil || strings.Contains(out, id) {
		t.Errorf("keys list after revoke = %v\n%s; want no %s", err, out, id)
	}
	if _, err := gantry("keys", "list", "--store", "mysql://db/x"); err == nil || !strings.Contains(err.Error(), "want a PostgreSQL URL") {
		t.Errorf("keys list --store mysql://… = %v; want a refusal asking for a PostgreSQL URL", err)
	}
}
