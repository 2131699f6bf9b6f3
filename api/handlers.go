package api

import (
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// handler implements oas.Handler and oas.SecurityHandler. Operations later issues build answer
// 501 through the embedded UnimplementedHandler.
type handler struct {
	oas.UnimplementedHandler
	cfg *Config
}

func (h *handler) mgmt() *core.Management { return h.cfg.Management }

var _ oas.Handler = (*handler)(nil)
var _ oas.SecurityHandler = (*handler)(nil)
