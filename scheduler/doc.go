// Package scheduler places work: the worker manager that starts workers on pools through
// adapters, scales them with an endpoint's load, and tracks their health. The queues that
// hand jobs to long-polling workers belong to the job store (core.JobStore).
package scheduler
