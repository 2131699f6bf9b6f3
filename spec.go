package gantry

import _ "embed"

// OpenAPI is openapi.yaml as this binary was built with it; the API serves it at
// GET /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
