package main

// This file runs the process pool's hidden volume mount helper (`gantry __mountns ...`, see
// adapters/process.MountHelper) before anything else of the binary: the pool starts it as
// root in a worker's new mount namespace, and it becomes the worker.

import (
	"os"

	"github.com/gantryhq/gantry/adapters/process"
)

func init() {
	if len(os.Args) > 1 && os.Args[1] == process.MountHelperArg {
		process.MountHelper(os.Args[2:])
	}
}
