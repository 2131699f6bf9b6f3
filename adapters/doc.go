// Package adapters holds Gantry's GPU pool adapters, each an implementation of
// scheduler.Pool: process (local processes, the embedded default) and docker (containers on
// a Docker engine); kubernetes and cloud are still to come. adapters/adaptertest is the kit every adapter's tests run to prove it
// honours the contract.
package adapters
