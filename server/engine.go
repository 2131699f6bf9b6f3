package server

import (
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/scheduler"
)

// Engine is the job engine and the scheduler wired to each other: a job queued on an endpoint
// scaled to zero starts a worker at once (the scheduler listens to the job store's wake-up,
// core.JobStore.ListenAvailable), and the scheduler hears the engine's worker signals (it
// subscribes to both in scheduler.New). The server builds one; so do tests and simulations
// that need the two without the API.
type Engine struct {
	Jobs      *core.Jobs
	Scheduler *scheduler.Scheduler
}

// EngineConfig configures an Engine. Jobs.Store is the job store (store/memq over Pebble's
// records in the embedded server). The engine fills in Scheduler.Jobs; a nil Scheduler.Clock
// or Log is the job engine's.
type EngineConfig struct {
	Jobs      core.JobsConfig
	Scheduler scheduler.Config
}

// NewEngine wires a job engine and a scheduler. The restart rules are not applied to the
// stored jobs: call Jobs.Recover.
func NewEngine(c EngineConfig) (*Engine, error) {
	e := &Engine{Jobs: core.NewJobs(c.Jobs)}
	c.Scheduler.Jobs = e.Jobs
	if c.Scheduler.Clock == nil {
		c.Scheduler.Clock = c.Jobs.Clock
	}
	if c.Scheduler.Log == nil {
		c.Scheduler.Log = c.Jobs.Log
	}
	s, err := scheduler.New(c.Scheduler)
	if err != nil {
		return nil, err
	}
	e.Scheduler = s
	return e, nil
}
