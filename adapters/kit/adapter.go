package kit

import (
	"context"
	"log/slog"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// Adapter is one kind of pool the config file may declare (`adapter: Name`), with C the type
// of its config section (the pool's `Name:` key, e.g. docker.Config under `docker:`). Each
// adapter package exports one (docker.Adapter, process.Adapter, ...), and server/pools.go
// registers it with one line.
type Adapter[C any] struct {
	// Name is the adapter's name in the config file, and its section's key.
	Name string
	// Validate checks a pool's section as the config file gave it (nil: the section is
	// omitted), before anything is built; nil = nothing to check. A *FieldError names the key
	// at fault, so that the server can point at the file's line.
	Validate func(c *C) error
	// Build makes a pool from its catalog description and its section (nil: omitted), with
	// what it needs of the server in env.
	Build func(ctx context.Context, env Env, desc core.PoolInfo, c *C) (pool.Pool, error)
	// Grace is how long the pool's workers may take to stop when the server shuts down, for
	// adapters whose workers outlive the server (their pools have a Shutdown method); nil for
	// the others.
	Grace func(c *C) time.Duration
}

// Env is what a builder gets of the server besides its pool's config entry.
type Env struct {
	Self      string              // this executable, for the built-in workers
	Builtins  []string            // the built-in worker images
	Images    map[string][]string // the config's images: the command a process pool runs for each
	LogDir    string              // where pools keep their workers' logs
	Log       *slog.Logger        // never nil
	PublicURL string              // the server's publicUrl ("" = none given)
	Devices   []string            // the names of the pool's GPUs, where discovery found them
	// VolumeRoot is where a local pool keeps the network volumes it stores when its section
	// names no volumeRoot: <data>/volumes.
	VolumeRoot string
	// Credential returns the registry credential with an id, from the config's registries.
	Credential func(ctx context.Context, id string) (Credential, error)
}

// Credential is a registry credential an endpoint names for pulling its image.
type Credential struct {
	Username string
	Password string // or a token
	Server   string // the registry, e.g. "ghcr.io"; "" = the image's registry
}

// FieldError is a fault in one key of an adapter's config section: Key is its path inside the
// section ("timeouts.pull"), Msg what is wrong.
type FieldError struct {
	Key string
	Msg string
}

func (e *FieldError) Error() string { return e.Key + ": " + e.Msg }
