package core_test

import (
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/storetest"
)

func TestMemoryLeases(t *testing.T) {
	t.Parallel()
	storetest.RunLeases(t, func(t *testing.T) (core.Leases, func() core.Leases) { return &core.MemoryLeases{}, nil })
}
