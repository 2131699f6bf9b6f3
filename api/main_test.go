package api_test

import (
	"testing"

	"github.com/gantryhq/gantry/internal/testkit"
)

// TestMain fails the run when a test leaves a goroutine behind: a handler, load-balancer
// connection or scheduler call that the server's Close did not end.
func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }
