// Package adapters holds Gantry's GPU pool adapters: process (local processes, the embedded
// default), and later docker, kubernetes and cloud.
package adapters
