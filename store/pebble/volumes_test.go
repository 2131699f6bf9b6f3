package pebble_test

import (
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/pebble"
	"github.com/gantryhq/gantry/store/storetest"
)

func TestVolumeStore(t *testing.T) {
	t.Parallel()
	storetest.RunVolumeStore(t, opener(func(s *pebble.Store) core.VolumeStore { return s }))
}
