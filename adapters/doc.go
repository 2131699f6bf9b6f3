// Package adapters holds Gantry's GPU pool adapters, each an implementation of
// scheduler.Pool: process (local processes, the embedded default), and later docker,
// kubernetes and cloud. adapters/adaptertest is the kit every adapter's tests run to prove it
// honours the contract.
package adapters
