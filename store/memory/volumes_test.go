package memory_test

import (
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/memory"
	"github.com/gantryhq/gantry/store/storetest"
)

// TestVolumeStore runs the network volume suite (until storetest.RunAll takes it up).
func TestVolumeStore(t *testing.T) {
	t.Parallel()
	storetest.RunVolumeStore(t, opener(func(s *memory.Store) core.VolumeStore { return s }))
}
