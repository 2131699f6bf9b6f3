package postgres_test

import (
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/postgres"
	"github.com/gantryhq/gantry/store/storetest"
)

func TestVolumeStore(t *testing.T) {
	t.Parallel()
	storetest.RunVolumeStore(t, opener(func(_ *testing.T, db *postgres.DB) core.VolumeStore { return db }))
}
