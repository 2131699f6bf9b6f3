// Package adapters holds Gantry's GPU pool adapters, each an implementation of pool.Pool in
// its own package, with its config section and its builder: process (local processes, the
// embedded default), docker (containers on a Docker engine), kubernetes (bare pods on a
// cluster) and runpod (rented RunPod pods). server/pools.go registers each with one line.
// adapters/kit holds the helpers every adapter shares (the live-worker registry, ordered event
// reporting, host ports, the registration types), and adapters/adaptertest is the suite every
// adapter's tests run to prove it honours the contract.
package adapters
