package runpodfake

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gantryhq/gantry/adapters/adaptertest"
)

// Runner runs pods' containers for the fake.
type Runner interface {
	// Run starts the container of a pod that is becoming RUNNING. An error fails the pod: it
	// goes to ERROR with the error in its system log.
	Run(spec ContainerSpec) (Container, error)
}

// ContainerSpec is what a Runner runs.
type ContainerSpec struct {
	Pod   string
	Image string
	Args  string            // the pod's args: the image's command with these arguments
	Env   map[string]string // the pod's env, with RUNPOD_POD_ID and RUNPOD_GPU_COUNT
	// Log receives each line the container writes (stdout and stderr). It may block briefly.
	Log func(line string)
}

// Container is a running container.
type Container interface {
	// Done is closed once the container's process has exited.
	Done() <-chan struct{}
	// ExitCode is the exit status once Done is closed (-1 when killed by a signal).
	ExitCode() int
	// Stop sends the polite signal (SIGTERM), then kills after grace, and returns once the
	// process has exited. It may be called more than once.
	Stop(grace time.Duration)
}

// ProcessRunner runs each pod's container as a local process with the pod's environment
// (and nothing else of the test's): the image's command, looked up in Images, with the pod's
// args split at spaces after it.
type ProcessRunner struct {
	// Images maps an image to its command (the entrypoint and its arguments). A pod of an image
	// not here fails to start, as an image that cannot be pulled.
	Images map[string][]string
	// Env is added to every process's environment ("K=V"), under the pod's own.
	Env []string
}

// Run starts the process.
func (r ProcessRunner) Run(spec ContainerSpec) (Container, error) {
	argv, ok := r.Images[spec.Image]
	if !ok || len(argv) == 0 {
		return nil, fmt.Errorf("pulling image %q: not found", spec.Image)
	}
	argv = append(slices.Clone(argv), strings.Fields(spec.Args)...)
	env := slices.Clone(r.Env)
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	p, err := adaptertest.StartProcess(argv, env, spec.Log)
	if err != nil {
		return nil, err
	}
	return p, nil
}

var _ Runner = ProcessRunner{}
var _ Container = (*adaptertest.Process)(nil)
