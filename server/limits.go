package server

import (
	"fmt"
	"time"

	"github.com/gantryhq/gantry/api"
)

// LimitsConfig bounds request bodies (the config file's `limits`; flags override it).
type LimitsConfig struct {
	// BodyBudgetMB is how many MiB of request bodies all requests together may hold at once;
	// a request past it gets 503 with Retry-After. 0 = 256; at least 64 (the largest body an
	// operation takes, a worker's result).
	BodyBudgetMB int64 `yaml:"bodyBudgetMB"`
	// BodyTimeout is how long one request body may take to arrive; a slower one gets 408 and
	// its connection closed. 0 = 60s; at least 1s.
	BodyTimeout time.Duration `yaml:"bodyTimeout"`
}

// Validate checks the limits once flags have been applied.
func (l LimitsConfig) Validate() error {
	if l.BodyBudgetMB != 0 && l.BodyBudgetMB < api.WorkerBodyCap>>20 {
		return fmt.Errorf("limits.bodyBudgetMB %d must be at least %d (the largest body an operation takes), or 0 for the default",
			l.BodyBudgetMB, api.WorkerBodyCap>>20)
	}
	if l.BodyTimeout != 0 && l.BodyTimeout < time.Second {
		return fmt.Errorf("limits.bodyTimeout %v must be at least 1s, or 0 for the default", l.BodyTimeout)
	}
	return nil
}

// apiLimits sets the API's body bounds from the limits (zero fields keep the API's defaults).
func (l LimitsConfig) apiLimits(c *api.Config) {
	c.BodyBudget = l.BodyBudgetMB << 20
	c.BodyReadTimeout = l.BodyTimeout
}
