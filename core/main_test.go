package core_test

import (
	"testing"

	"github.com/gantryhq/gantry/internal/testkit"
)

// TestMain fails the run when a test leaves a goroutine behind (a waiter, a webhook delivery,
// a long poll that never ended).
func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }
