package pebble_test

import (
	"testing"

	"github.com/gantryhq/gantry/internal/testkit"
)

// TestMain fails the run if a job store wait, parked taker or listener, or one of the
// database's goroutines, outlives its test.
func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }
