package server_test

import (
	"testing"

	"github.com/gantryhq/gantry/internal/testkit"
)

// TestMain fails the run when a test leaves a goroutine behind: a background loop, worker,
// webhook delivery or store that the server's Shutdown and Close did not end.
func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }
