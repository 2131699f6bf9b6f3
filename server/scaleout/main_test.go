package scaleout_test

import (
	"os"
	"testing"

	"github.com/gantryhq/gantry/adapters/process"
	"github.com/gantryhq/gantry/internal/pgtest"
)

// TestMain runs the tests, unless a process pool runs this binary as its Self: then it is the
// mount helper (`__mountns`) or a built-in worker (`worker NAME`, see volumes_test.go).
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == process.MountHelperArg {
		process.MountHelper(os.Args[2:])
	}
	if len(os.Args) > 2 && os.Args[1] == "worker" {
		os.Exit(runWorker(os.Args[2]))
	}
	pgtest.Main(m)
}
