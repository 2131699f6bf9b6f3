package server

import (
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/scheduler"
)

// Engine is the job engine and the scheduler wired to each other: the engine dispatches
// queued jobs through the scheduler's queues, a job queued on an endpoint scaled to zero
// starts a worker at once (Demand), and the scheduler hears the engine's worker signals (it
// subscribes in scheduler.New). The server builds one; so do tests and simulations that need
// the two without the API.
type Engine struct {
	Jobs      *core.Jobs
	Queues    *scheduler.Queues
	Scheduler *scheduler.Scheduler
}

// EngineConfig configures an Engine. The engine fills in what wires the two together:
// Jobs.Dispatch, Scheduler.Jobs and Scheduler.Queues. A nil Scheduler.Clock or Log is the job
// engine's.
type EngineConfig struct {
	Jobs      core.JobsConfig
	Scheduler scheduler.Config
}

// NewEngine wires a job engine and a scheduler. The stored jobs are not loaded: call
// Jobs.Recover.
func NewEngine(c EngineConfig) (*Engine, error) {
	e := &Engine{Queues: &scheduler.Queues{}}
	if _, system := c.Jobs.Clock.(core.SystemClock); !system {
		e.Queues.Clock = c.Jobs.Clock // nil there reads the system clock without an interface call
	}
	c.Jobs.Dispatch = e.Queues
	e.Jobs = core.NewJobs(c.Jobs)
	c.Scheduler.Jobs, c.Scheduler.Queues = e.Jobs, e.Queues
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
	e.Queues.OnEnqueue = s.Demand
	return e, nil
}
