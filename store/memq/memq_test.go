package memq_test

import (
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/memq"
	"github.com/gantryhq/gantry/store/storetest"
)

func TestJobStore(t *testing.T) {
	t.Parallel()
	storetest.RunJobStore(t, func(t *testing.T) core.JobStore {
		s, err := memq.Open(memq.NewRecords(), memq.Options{})
		if err != nil {
			t.Fatalf("Open = %v; want nil", err)
		}
		return s
	})
}
