// Package kit holds what every pool adapter needs besides its own runtime, so that an adapter
// author writes only the part that talks to processes, containers, pods or a cloud API:
//
//   - Live, the registry of an adapter's live workers and the devices they hold (Devices);
//   - CheckPool, the checks of the pool description every adapter's config shares;
//   - Reporter, the ordered, lock-free delivery of a worker's events to the scheduler;
//   - HostPorts, free ports of this host for workers that share its network;
//   - TailFile, the last lines of a worker's log file, for a LogSource;
//   - Adapter, Env and FieldError, an adapter's registration: its name, its config section's
//     check and its builder, which gets what it needs of the server in an Env;
//   - VolumeDirs, network volumes kept as directories on a local host.
//
// An adapter implements pool.Pool; adapters/adaptertest checks it. DESIGN.md ("A new pool
// adapter") has the recipe.
package kit
