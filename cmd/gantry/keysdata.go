package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/server"
)

// holdsGantryData reports whether dir is a Gantry data directory: `gantry serve` has run on it
// (its store, dir/pebble) or keys were created there (dir/keys).
func holdsGantryData(dir string) bool {
	for _, sub := range []string{"pebble", "keys"} {
		if fi, err := os.Stat(filepath.Join(dir, sub)); err == nil && fi.IsDir() {
			return true
		}
	}
	return false
}

// checkKeyDir refuses a data directory that holds no Gantry data, so that a mistyped --data
// does not quietly start a key store the server never reads, unless init says to start one
// there.
func checkKeyDir(data string, init bool) error {
	if !init && !holdsGantryData(data) {
		return fmt.Errorf("--data %s holds no Gantry data (neither %s nor %s exists): give the directory `gantry serve --data` uses, or add --init to start a new one there",
			data, filepath.Join(data, "pebble"), filepath.Join(data, "keys"))
	}
	return nil
}

// checkKeyEndpoints checks that each id names an endpoint of user, or a ready-made model's
// endpoint, in the data directory's store. The store can only be read while no `gantry
// serve` holds it; then (or when there is no store yet) the ids are not checked, which is said
// on notes. Such a key is harmless: job calls on endpoints its user does not own are not found.
func checkKeyEndpoints(ctx context.Context, ks *server.KeyStores, data, user string, ids []string, notes io.Writer) error {
	for _, id := range ids {
		if id == "" {
			return errors.New("--endpoint: the id is empty")
		}
	}
	if len(ids) == 0 {
		return nil
	}
	endpoints, release, err := ks.Endpoints()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(notes, "gantry: note: --endpoint ids not checked: %s has no store yet\n", data)
		return nil
	case err != nil:
		fmt.Fprintf(notes, "gantry: note: --endpoint ids not checked: %v\n", err)
		return nil
	}
	defer release()
	return checkEndpoints(ctx, &core.Management{Endpoints: endpoints}, user, ids)
}

// checkEndpoints checks that each id names an endpoint of user, or a ready-made model's.
func checkEndpoints(ctx context.Context, mgmt *core.Management, user string, ids []string) error {
	for _, id := range ids {
		if id == "" {
			return errors.New("--endpoint: the id is empty")
		}
		_, _, err := mgmt.JobEndpoint(ctx, user, id)
		switch {
		case core.KindOf(err) == core.KindNotFound:
			return fmt.Errorf("--endpoint %s: user %s has no endpoint %q, and no ready-made model has that id", id, user, id)
		case err != nil:
			return fmt.Errorf("--endpoint %s: %w", id, err)
		}
	}
	return nil
}
