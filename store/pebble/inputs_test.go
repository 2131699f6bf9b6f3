package pebble_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/memq"
	"github.com/gantryhq/gantry/store/pebble"
)

// bigInput is a JSON input of InputFileBytes or more.
func bigInput(n int) []byte {
	return append(append([]byte(`{"s":"`), bytes.Repeat([]byte("x"), n-8)...), `"}`...)
}

// TestLargeInputKeptInFile: an input of InputFileBytes or more is kept in a file of its own,
// read back byte for byte, survives a reopen, and goes with its job; a smaller one stays in
// Pebble.
func TestLargeInputKeptInFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := pebble.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	big, small := bigInput(pebble.InputFileBytes), []byte(`{"small":true}`)
	if err := st.PutJob(&core.Job{ID: "big", Status: core.InQueue}, big, true); err != nil {
		t.Fatal(err)
	}
	if err := st.PutJob(&core.Job{ID: "small", Status: core.InQueue}, small, true); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "inputs", "big.input")
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("%s holds %d bytes, %v; want the %d-byte input", file, len(got), err, len(big))
	}
	if n := st.InputFiles(); n != 1 {
		t.Errorf("InputFiles = %d; want 1 (the small input stays in Pebble)", n)
	}
	st.Close()

	st, err = pebble.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for id, want := range map[string][]byte{"big": big, "small": small} {
		if got, err := st.Input(id); err != nil || !bytes.Equal(got, want) {
			t.Errorf("Input(%s) after reopen = %d bytes, %v; want %d bytes, the input", id, len(got), err, len(want))
		}
	}
	j := &core.Job{ID: "big", Status: core.Completed}
	if err := st.PutJob(j, nil, true); err != nil { // nil input keeps the file
		t.Fatal(err)
	}
	if got, err := st.Input("big"); err != nil || !bytes.Equal(got, big) {
		t.Errorf("Input(big) after a record update = %d bytes, %v; want the input", len(got), err)
	}
	if err := st.DeleteJob("big"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after DeleteJob, stat %s = %v; want it removed", file, err)
	}
	if _, err := st.Input("big"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Input(big) after DeleteJob = %v; want ErrNotFound", err)
	}
}

// TestStrayInputFilesRemovedAtOpen: a file no stored job refers to (a crash between writing it
// and storing its job, or between deleting the job and removing it), or left half-written, is
// removed when the store opens; a file a job refers to stays.
func TestStrayInputFilesRemovedAtOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := pebble.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	big := bigInput(pebble.InputFileBytes)
	if err := st.PutJob(&core.Job{ID: "kept"}, big, true); err != nil {
		t.Fatal(err)
	}
	if err := st.PutJob(&core.Job{ID: "inline"}, []byte(`{}`), true); err != nil {
		t.Fatal(err)
	}
	st.Close()
	inputs := filepath.Join(dir, "inputs")
	strays := []string{"orphan.input", "inline.input", "kept.tmp", "not-a-job"}
	for _, name := range strays {
		if err := os.WriteFile(filepath.Join(inputs, name), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st, err = pebble.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, name := range strays {
		if _, err := os.Stat(filepath.Join(inputs, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stat %s after reopen = %v; want the stray file removed", name, err)
		}
	}
	if got, err := st.Input("kept"); err != nil || !bytes.Equal(got, big) {
		t.Errorf("Input(kept) = %d bytes, %v; want the input", len(got), err)
	}
	if got, err := st.Input("inline"); err != nil || string(got) != `{}` {
		t.Errorf("Input(inline) = %s, %v; want {}", got, err)
	}
	if n := st.InputFiles(); n != 1 {
		t.Errorf("InputFiles = %d; want 1", n)
	}
}

// TestLargeInputStoredWithoutCopy: storing a large input allocates next to nothing: the file is
// written from the caller's buffer. Stored in Pebble it was copied into a write batch of its
// size, and a batch over half a memtable became a memtable of its own; twelve 20 MB runsync
// inputs stored together took the server to 3x the bodies. Not parallel: it measures the
// process's allocations.
func TestLargeInputStoredWithoutCopy(t *testing.T) {
	st, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	big := bigInput(4 << 20)
	_ = st.PutJob(&core.Job{ID: "warm"}, []byte(`{}`), true) // what the first write sets up is not counted
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := st.PutJob(&core.Job{ID: "big"}, big, false); err != nil {
		t.Fatal(err)
	}
	if err := st.SyncJobs(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > uint64(len(big)/16) {
		t.Errorf("storing a %d-byte input allocated %d bytes; want under %d (no copy of it)", len(big), got, len(big)/16)
	}
}

// TestRunSyncInputStoredInFileOnKeep: a runsync job's large input is held in memory while its
// runsync waits (no file, nothing in Pebble); KeepInput, when the wait ends first, writes it to
// its file, and the job, input included, survives a reopen.
func TestRunSyncInputStoredInFileOnKeep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := pebble.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	js, err := st.Jobs(memq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	j := core.Job{ID: core.NewJobKey(true).String(), Sync: true, Endpoint: "ep", Status: core.InQueue,
		CreatedAt: now, QueuedAt: now, ExpiresAt: now.Add(time.Hour)}
	big := bigInput(2 * pebble.InputFileBytes)
	if _, err := js.Insert(ctx, j, big, false); err != nil {
		t.Fatal(err)
	}
	if n := st.InputFiles(); n != 0 {
		t.Errorf("InputFiles while the runsync waits = %d; want 0 (held in memory)", n)
	}
	if err := js.KeepInput(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if n := st.InputFiles(); n != 1 {
		t.Errorf("InputFiles after KeepInput = %d; want 1", n)
	}
	st.Close()

	st, err = pebble.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	js, err = st.Jobs(memq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := js.Take(ctx, "ep", "w", 1, time.Now())
	if err != nil || len(got) != 1 || got[0].Job.ID != j.ID || !bytes.Equal(got[0].Input, big) {
		t.Fatalf("Take after reopen = %d jobs, %v; want %s with its %d-byte input", len(got), err, j.ID, len(big))
	}
}
