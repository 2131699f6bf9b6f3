package process

import (
	"testing"

	"github.com/gantryhq/gantry/internal/testkit"
)

// TestMain fails the run when a test leaves a goroutine behind: a worker's waiter or log
// copier that outlived its process.
func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }
