package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/pebble"
)

// TestKeysDataDir: keys commands refuse a --data that holds no Gantry data (a mistyped path
// would otherwise start a key store the server never reads) unless --init says to start one,
// and create nothing there.
func TestKeysDataDir(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	missing := filepath.Join(t.TempDir(), "gantry-dta")
	served := t.TempDir()
	st, err := pebble.Open(filepath.Join(served, "pebble"))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	fresh := filepath.Join(t.TempDir(), "new-data")

	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string // "" = success
	}{
		{"create in an empty dir", []string{"keys", "create", "--data", empty, "--user", "alice"}, "holds no Gantry data"},
		{"create in a missing dir", []string{"keys", "create", "--data", missing, "--user", "alice"}, "add --init"},
		{"list a missing dir", []string{"keys", "list", "--data", missing}, "holds no Gantry data"},
		{"revoke in an empty dir", []string{"keys", "revoke", "--data", empty, "key_x"}, "holds no Gantry data"},
		{"create where serve ran", []string{"keys", "create", "--data", served, "--user", "alice"}, ""},
		{"create with --init", []string{"keys", "create", "--data", fresh, "--user", "alice", "--init"}, ""},
		{"create again without --init", []string{"keys", "create", "--data", fresh, "--user", "bob"}, ""},
	} {
		var stdout, stderr bytes.Buffer
		err := run(tc.args, &stdout, &stderr)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: gantry %v = %v; want success", tc.name, tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: gantry %v = %v; want an error containing %q", tc.name, tc.args, err, tc.wantErr)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("the mistyped --data %s was created (%v)", missing, err)
	}
	if entries, _ := os.ReadDir(empty); len(entries) > 0 {
		t.Errorf("the refused --data %s got %d entries; want none", empty, len(entries))
	}
}

// TestKeysCreateEndpoints: --endpoint ids must be the user's endpoints or a ready-made
// model's, checked in the store when no server holds it; when one does, the key is made and
// stderr says the ids were not checked.
func TestKeysCreateEndpoints(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	st, err := pebble.Open(filepath.Join(data, "pebble"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, e := range []core.Endpoint{
		{ID: "epalice", Owner: "alice", CreatedAt: now},
		{ID: "epbob", Owner: "bob", CreatedAt: now},
		{ID: "gantry-text", Owner: core.PlatformOwner, CreatedAt: now},
	} {
		if err := st.PutEndpoint(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	create := func(eps ...string) (string, error) {
		args := []string{"keys", "create", "--data", data, "--user", "alice", "--scope", "jobs"}
		for _, ep := range eps {
			args = append(args, "--endpoint", ep)
		}
		var stdout, stderr bytes.Buffer
		err := run(args, &stdout, &stderr)
		return stderr.String(), err
	}
	for _, tc := range []struct {
		eps     []string
		wantErr string
	}{
		{[]string{"epalice"}, ""},
		{[]string{"epalice", "gantry-text"}, ""},
		{[]string{"epbob"}, `user alice has no endpoint "epbob"`},
		{[]string{"epalice", "epalic"}, `user alice has no endpoint "epalic"`},
		{[]string{""}, "the id is empty"},
	} {
		if _, err := create(tc.eps...); (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("keys create --endpoint %v = %v; want error %q", tc.eps, err, tc.wantErr)
		}
	}

	held, err := pebble.Open(filepath.Join(data, "pebble")) // as a running gantry serve does
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if notes, err := create("epbob"); err != nil || !strings.Contains(notes, "--endpoint ids not checked") {
		t.Errorf("keys create --endpoint while the store is held = %v, stderr %q; want the key and a note that the ids were not checked", err, notes)
	}
}
