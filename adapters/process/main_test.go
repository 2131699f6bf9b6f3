package process

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/testkit"
)

// TestMain fails the run when a test leaves a goroutine behind: a worker's waiter or log
// copier that outlived its process.
//
// Run as `worker NAME ...`, as the pool runs this binary's built-in workers when it is Self, it
// prints its arguments and uid instead and exits. Run as `__mountns ...`, it is the volume
// mount helper, as the gantry binary is.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == MountHelperArg {
		MountHelper(os.Args[2:])
	}
	if len(os.Args) > 2 && os.Args[1] == "worker" {
		fmt.Printf("%s uid=%d\n", strings.Join(os.Args[1:], " "), os.Getuid())
		os.Exit(0)
	}
	testkit.VerifyNoLeaks(m)
}
