package api

import (
	"context"
	"net/http"
	"strconv"

	"github.com/gantryhq/gantry"
)

// GetOpenAPI implements getOpenAPI: the contract the server was built from, no key needed.
func (h *handler) GetOpenAPI(_ context.Context, w http.ResponseWriter) error {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Length", strconv.Itoa(len(gantry.OpenAPI)))
	_, err := w.Write(gantry.OpenAPI)
	return err
}
