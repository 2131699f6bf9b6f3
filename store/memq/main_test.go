package memq_test

import (
	"testing"

	"github.com/gantryhq/gantry/internal/testkit"
)

// TestMain fails the run if a wait, parked taker or listener outlives its test.
func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }
