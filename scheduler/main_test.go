package scheduler

import (
	"testing"

	"github.com/gantryhq/gantry/internal/testkit"
)

// TestMain fails the run when a test leaves a goroutine behind: a pool call, health poller or
// signal watcher that Close did not end.
func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }
