package api

import (
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// handler implements oas.Handler and oas.SecurityHandler. It embeds no default: an operation
// added to openapi.yaml without its method here fails to compile (the guard below) rather
// than answering 501.
type handler struct {
	cfg *Config
}

func (h *handler) mgmt() *core.Management { return h.cfg.Management }

var _ oas.Handler = (*handler)(nil)
var _ oas.SecurityHandler = (*handler)(nil)
