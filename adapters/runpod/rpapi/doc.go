// Package rpapi is the client and server that ogen generates from ../openapi.yaml, the subset
// of RunPod's REST API v2 that the runpod pool uses. Do not edit: run `make generate`.
package rpapi
