// Package conformance is Gantry's black-box suite. It builds the gantry image and the built-in
// worker images from the static binary (build/*.Dockerfile), starts Gantry in a container with
// testcontainers-go (host networking, the Docker socket mounted, workers started as containers
// by the Docker pool adapter), and drives it only over HTTP: the management API, the error
// format, auth, rate-limit headers, the whole job life cycle, load-balancing endpoints, network
// volumes (worker containers of testdata/volworker reading and writing /runpod-volume), and
// RunPod's own npm client `runpod-sdk` (pinned in js/package.json).
//
// It needs a Docker engine: `make conformance` runs it alone. Without an engine the tests skip,
// unless GANTRY_REQUIRE_DOCKER=1 (CI sets it), which makes them fail instead.
package conformance
