// Package core is Gantry's domain: endpoint validation, defaults and template merge, the
// catalog of pools, API keys and scopes, and per-user rate-limit windows. It declares the small
// interfaces it needs (stores, clock) and performs no I/O itself; store/ and scheduler/
// implement them.
package core
