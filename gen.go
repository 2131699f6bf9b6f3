// Package gantry is the root of Gantry, a self-hosted serverless GPU platform.
// The contract lives in openapi.yaml; `make generate` regenerates oas/ from it.
package gantry

//go:generate go tool ogen --config .ogen.yml --target oas --package oas --clean openapi.yaml
