package process

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/adapters/adaptertest"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/pool"
)

// A hung worker (stopped with SIGSTOP behind the pool's back) cannot act on SIGTERM: Kill ends
// it at once, long before the stop grace.
func TestPoolKillsAHungWorker(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{StopGrace: time.Hour})
	spec := f.spec("test/pids")
	f.start(spec)
	var shell, child int
	if _, err := fmt.Sscan(f.probe(spec), &shell, &child); err != nil {
		t.Fatalf("reading the worker's pids: %v", err)
	}
	if err := syscall.Kill(-shell, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, waitTimeout, "the worker's processes stopped (T)", func() bool { return procState(shell) == "T" && procState(child) == "T" })
	if err := f.pool.Kill(t.Context(), spec.ID); err != nil {
		t.Fatalf("Kill = %v", err)
	}
	e := f.rec.Wait(t, spec.ID, pool.WorkerExited, waitTimeout) // well inside the grace
	if !e.Stopped || e.Err != nil {
		t.Errorf("Exited: Stopped=%v, Err=%v; want true, nil", e.Stopped, e.Err)
	}
	if got, want := adaptertest.FormatEvents(f.rec.Events(spec.ID)), "running, exited(stopped)"; got != want {
		t.Errorf("events = %s; want %s", got, want)
	}
	if err := f.pool.Kill(t.Context(), spec.ID); err != nil {
		t.Errorf("Kill of an exited worker = %v; want nil", err)
	}
}
