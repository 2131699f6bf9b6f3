package storetest

import (
	"fmt"
	"testing"

	"github.com/gantryhq/gantry/core"
)

// Backend is a store backend as the suites see it: one Opener per port core declares. A
// backend implements a port by setting its Opener; a port it leaves nil needs a reason in
// Lacks, which RunAll gives as it skips that port's suite. A nil Opener without a reason fails
// RunAll, and so does a port added to Backend that a backend has not yet taken up: no backend
// skips a suite unseen.
type Backend struct {
	Endpoints    Opener[core.EndpointStore]
	Templates    Opener[core.TemplateStore]
	Volumes      Opener[core.VolumeStore]
	Keys         Opener[core.KeyStore]
	Usage        Opener[core.UsageStore]
	History      Opener[core.HistoryStore]
	Files        Opener[core.FileStore]
	WorkerTokens Opener[core.WorkerTokenStore]
	RateLimits   Opener[core.RateLimits]
	Leases       Opener[core.Leases]
	Jobs         Opener[core.JobStore]
	// Lacks says why the backend implements no such port, by the port's field name, e.g.
	// {"Leases": "one replica only, which always leads"}.
	Lacks map[string]string
}

// RunAll runs the suite of every port against b, each in a parallel subtest named after the
// port's field. A new port's suite is one line here (and a field of Backend).
func RunAll(t *testing.T, b Backend) {
	t.Helper()
	ports := []port{
		portSuite("Endpoints", b.Endpoints, RunEndpointStore),
		portSuite("Templates", b.Templates, RunTemplateStore),
		portSuite("Volumes", b.Volumes, RunVolumeStore),
		portSuite("Keys", b.Keys, RunKeyStore),
		portSuite("Usage", b.Usage, RunUsageStore),
		portSuite("History", b.History, RunHistoryStore),
		portSuite("Files", b.Files, RunFileStore),
		portSuite("WorkerTokens", b.WorkerTokens, RunWorkerTokenStore),
		portSuite("RateLimits", b.RateLimits, RunRateLimits),
		portSuite("Leases", b.Leases, RunLeases),
		portSuite("Jobs", b.Jobs, RunJobStore),
	}
	known := map[string]bool{}
	for _, p := range ports {
		known[p.name] = true
	}
	for name := range b.Lacks {
		if !known[name] {
			t.Errorf("Backend.Lacks names %q, which is no port of Backend", name)
		}
	}
	for _, p := range ports {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			skip, fail := verdict(p.name, p.run != nil, b.Lacks)
			switch {
			case fail != "":
				t.Fatal(fail)
			case skip != "":
				t.Skip(skip)
			default:
				p.run(t)
			}
		})
	}
}

// verdict says what RunAll does with the port name: run its suite (both empty), skip it with
// the reason the backend gives in lacks (skip), or fail (fail), when the backend leaves the
// port without a reason or gives one for a port it implements.
func verdict(name string, implemented bool, lacks map[string]string) (skip, fail string) {
	reason, listed := lacks[name]
	switch {
	case implemented && listed:
		return "", fmt.Sprintf("the backend sets Backend.%s, yet Lacks says it has none (%q)", name, reason)
	case implemented:
		return "", ""
	case reason != "":
		return fmt.Sprintf("the backend implements no %s: %s", name, reason), ""
	default:
		return "", fmt.Sprintf("the backend implements no %s and Backend.Lacks says not why: set Backend.%s, or give the reason in Lacks", name, name)
	}
}

// port is one port's suite, ready to run; run is nil when the backend opens no such port.
type port struct {
	name string
	run  func(t *testing.T)
}

// portSuite binds a port's suite to the backend's Opener for it.
func portSuite[S any](name string, open Opener[S], suite func(*testing.T, Opener[S])) port {
	if open == nil {
		return port{name: name}
	}
	return port{name: name, run: func(t *testing.T) { suite(t, open) }}
}
