// Package testworker is the container the adapters' tests run in their stand-ins for a
// cloud or a cluster: a test binary started again as a pod's process runs Run with the pod's
// last argument, and behaves as adaptertest's behaviours need, or as Gantry's echo worker.
package testworker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/gantryhq/gantry/adapters/adaptertest"
	gworker "github.com/gantryhq/gantry/worker"
	"github.com/gantryhq/gantry/worker/echo"
)

// The arguments Run understands.
const (
	Serves  = "serves"  // prints its environment (EnvLine), runs until SIGTERM, exits 0
	Crashes = "crashes" // exits at once with adaptertest.CrashStatus
	Ignores = "ignores" // prints its environment, ignores SIGTERM: only SIGKILL ends it
	Echo    = "echo"    // Gantry's echo worker, configured from the worker-protocol env
)

// EnvLine starts the line on which a Serves or Ignores worker prints its environment as JSON.
const EnvLine = "GANTRY_TEST_ENV "

// Args is the argument for a worker of adaptertest behaviour b ("" for Unstartable, which
// each adapter's test makes unstartable its own way).
func Args(b adaptertest.Behaviour) string {
	switch b {
	case adaptertest.Serves:
		return Serves
	case adaptertest.Crashes:
		return Crashes
	case adaptertest.IgnoresStop:
		return Ignores
	}
	return ""
}

// Run behaves as arg says and returns the exit status.
func Run(arg string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	switch arg {
	case Echo:
		cfg, err := gworker.ConfigFromEnv()
		if err != nil {
			fmt.Println("worker config:", err)
			return 2
		}
		if err := gworker.Run(ctx, cfg, echo.Handler); err != nil {
			fmt.Println("worker:", err)
			return 1
		}
		return 0
	case Crashes:
		fmt.Println("crashing on purpose")
		return adaptertest.CrashStatus
	case Ignores:
		signal.Ignore(syscall.SIGTERM)
	}
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	b, _ := json.Marshal(env)
	fmt.Printf("%s%s\n", EnvLine, b)
	if arg == Ignores {
		select {}
	}
	<-ctx.Done()
	return 0
}

// Env finds the environment a Serves or Ignores worker printed among its log's lines.
func Env(lines []string) (map[string]string, bool) {
	for _, line := range lines {
		if j, ok := strings.CutPrefix(line, EnvLine); ok {
			env := map[string]string{}
			if json.Unmarshal([]byte(j), &env) == nil {
				return env, true
			}
		}
	}
	return nil, false
}
