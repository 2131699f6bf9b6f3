// Package adapters holds Gantry's GPU pool adapters, each an implementation of
// pool.Pool: process (local processes, the embedded default) and docker (containers on
// a Docker engine); kubernetes and cloud are still to come. adapters/kit holds the helpers
// every adapter shares (the live-worker registry, ordered event reporting, host ports), and
// adapters/adaptertest is the suite every adapter's tests run to prove it honours the contract.
package adapters
