// Package core is Gantry's domain: the rules and the services that apply them, with no I/O of
// its own. It holds
//
//   - management: endpoint and template validation, defaults and template merge, the catalog
//     of pools, data centers and templates, network volumes and their owners;
//   - the job engine (Jobs): the job state machine, submit, take, done, streams, retries,
//     cancel, purge, retention, worker liveness and the marks webhook delivery works from;
//   - API keys, scopes and worker tokens; per-user rate-limit windows; billing of the model
//     endpoints by their output; endpoint history.
//
// It declares the ports it needs (stores, clock, pools' worker registry, notifier, observer)
// in ports.go, jobstore.go and beside their services; store/, scheduler/, webhook/, leader/
// and telemetry/ implement them, and server/ wires them together. Core imports nothing else of
// Gantry's (deps_test.go).
package core
