// Package adaptertest is the kit every GPU pool adapter runs to prove it honours
// pool.Pool, so that an adapter can be written without reading the scheduler. An adapter's
// test gives Run a Harness: how to make a fresh pool, and specs for workers of a few known
// behaviours (one that serves until stopped, one that crashes, one that ignores the polite stop
// signal, one the pool cannot start):
//
//	func TestPoolContract(t *testing.T) {
//		t.Parallel()
//		adaptertest.Run(t, adaptertest.Harness{
//			New:       func(t *testing.T) pool.Pool { return newPool(t) },
//			Spec:      spec,
//			StopGrace: 300 * time.Millisecond,
//		})
//	}
//
// Run checks, each in a parallel subtest on a fresh pool: start and stop (exactly one
// WorkerRunning, then exactly one WorkerExited with Stopped and no Err); crash reporting (one
// WorkerExited, not Stopped, with an Err naming the exit status); Stop of an unknown or exited
// worker answering nil; a worker that ignores the stop signal forced out within the grace;
// suspend and resume (or ErrUnsupported to both); the environment and devices handed over;
// capacity accounting by device index (too many, out of range or in use: ErrNoCapacity; free
// again after the holder's WorkerExited; one winner when many race for a device); concurrent
// starts and stops; a stable, sane Describe. Throughout it checks every worker's events (running
// first, suspended and resumed alternating, exited once and last, none for a worker Start
// refused), that a worker outlives the context given to Start, and that the goroutines a pool
// starts in its methods end once its workers have exited.
package adaptertest

import (
	"cmp"
	"testing"
	"time"

	"github.com/gantryhq/gantry/pool"
)

// Behaviour is what a worker from Harness.Spec does.
type Behaviour int

// Behaviours a Harness provides specs for.
const (
	// Serves runs until it is stopped and exits with status 0 on the pool's polite stop signal
	// (SIGTERM for a process or a container).
	Serves Behaviour = iota + 1
	// Crashes exits at once with status CrashStatus.
	Crashes
	// IgnoresStop ignores the polite stop signal: only the pool's force (SIGKILL) ends it.
	IgnoresStop
	// Unstartable is a spec the pool's Start refuses: an image it has no command for, or one
	// that does not exist.
	Unstartable
)

// CrashStatus is the exit status of a worker that Crashes. The Err of its WorkerExited event
// must name it; if the error chain has an `ExitCode() int` method (*exec.ExitError has), it
// must answer it.
const CrashStatus = 37

func (b Behaviour) String() string {
	switch b {
	case Serves:
		return "serves"
	case Crashes:
		return "crashes"
	case IgnoresStop:
		return "ignores-stop"
	case Unstartable:
		return "unstartable"
	}
	return "unknown"
}

// Harness is what Run needs to test one adapter.
type Harness struct {
	// New returns a fresh pool. Run calls it once per subtest, from parallel subtests;
	// register the pool's teardown with t.Cleanup (it runs after Run has stopped the pool's
	// workers and seen them exit). Goroutines the pool starts in New are not leak-checked.
	New func(t *testing.T) pool.Pool
	// Spec returns a spec for a worker that behaves as b. Run sets its ID, GPUs and Report and
	// adds variables to a copy of its Env, keeping the harness's own (a Probe can use them to
	// find the worker's output). It may call t.Skip for a behaviour it cannot provide. Run
	// stops the worker before the cleanups Spec registers run (a t.TempDir the worker writes
	// to outlives it).
	Spec func(t *testing.T, b Behaviour) pool.WorkerSpec
	// Probe, when set, reports the environment a worker of behaviour Serves or IgnoresStop
	// saw, and ok once the worker is up and ready (an IgnoresStop worker then ignores the stop
	// signal). Run polls it from the test's goroutine until ok. With it Run checks the
	// environment handed over, and that a forced stop waits for the grace; without it those
	// checks are skipped.
	Probe func(t *testing.T, spec pool.WorkerSpec) (env map[string]string, ok bool)
	// DeviceEnv, when set with Probe, returns the variables a worker given the device indices
	// gpus must find in its environment on a GPU pool (the process pool:
	// CUDA_VISIBLE_DEVICES=0,3). Not used on CPU pools.
	DeviceEnv func(gpus []int) map[string]string
	// StopGrace is the pool's grace period: how long Stop waits after the polite signal before
	// it forces the worker. Required: a forced stop must take at least this long (with Probe)
	// and its exit must come within StopGrace + Timeout.
	StopGrace time.Duration
	// Timeout bounds every wait for an event beyond StopGrace: a start, a crash, a suspend.
	// 0 means 20 s.
	Timeout time.Duration
	// Workers is how many workers the concurrency subtests start at once. 0 means 16.
	Workers int
}

// Run runs the kit's subtests against the pool h makes. See the package doc for what they
// check.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil || h.Spec == nil || h.StopGrace <= 0 {
		t.Fatal("adaptertest.Run: Harness.New, Harness.Spec and Harness.StopGrace are required")
	}
	h.Timeout = cmp.Or(h.Timeout, 20*time.Second)
	h.Workers = cmp.Or(h.Workers, 16)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"Describe", testDescribe},
		{"StartStop", testStartStop},
		{"Crash", testCrash},
		{"Unknown", testUnknown},
		{"Unstartable", testUnstartable},
		{"ForcedStop", testForcedStop},
		{"SuspendResume", testSuspendResume},
		{"StopSuspended", testStopSuspended},
		{"Env", testEnv},
		{"Ports", testPorts},
		{"Capacity", testCapacity},
		{"CapacityRace", testCapacityRace},
		{"Concurrent", testConcurrent},
		{"Workers", testWorkers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}
