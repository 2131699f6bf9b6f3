package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/models"
)

// syncModelEndpoints makes the platform endpoints match the model catalog: each model's
// endpoint is created or updated (its workers start and scale like any endpoint's), and the
// endpoints of models no longer in the catalog are deleted.
func syncModelEndpoints(ctx context.Context, mgmt *core.Management, specs []models.Spec, defaultPool string, log *slog.Logger) error {
	want := map[string]bool{}
	for _, s := range specs {
		want[s.ID] = true
		if _, err := mgmt.PutPlatformEndpoint(ctx, s.Endpoint(defaultPool)); err != nil {
			return fmt.Errorf("model %s: its endpoint: %w", s.ID, err)
		}
		log.Info("ready-made model", "id", s.ID, "type", s.Type, "image", s.Image, "pricePerUnit", core.FormatMicros(s.PriceMicros))
	}
	eps, err := mgmt.PlatformEndpoints(ctx)
	if err != nil {
		return err
	}
	for _, ep := range eps {
		if !want[ep.ID] {
			if err := mgmt.DeletePlatformEndpoint(ctx, ep.ID); err != nil {
				return fmt.Errorf("removing the endpoint of model %s, no longer in the catalog: %w", ep.ID, err)
			}
			log.Info("ready-made model removed", "id", ep.ID)
		}
	}
	return nil
}

// sweepFiles removes expired produced files every interval until ctx ends.
func sweepFiles(ctx context.Context, files *core.Files, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := files.Sweep(ctx); err != nil && ctx.Err() == nil {
			log.Error("removing expired files", "err", err)
		} else if n > 0 {
			log.Info("removed expired files", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
