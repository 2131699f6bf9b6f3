package runpod

//go:generate go tool ogen --config .ogen.yml --target rpapi --package rpapi --clean openapi.yaml
