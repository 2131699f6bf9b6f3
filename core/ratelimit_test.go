package core_test

import (
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/storetest"
)

// TestRateLimiter runs the in-memory windows through the suite every RateLimits runs.
func TestRateLimiter(t *testing.T) {
	t.Parallel()
	storetest.RunRateLimits(t, func(*testing.T) (core.RateLimits, func() core.RateLimits) { return &core.RateLimiter{}, nil })
}
