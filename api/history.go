package api

import (
	"context"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// GetEndpointHistory implements getEndpointHistory: the endpoint's jobs ended per step over
// the last hour or day, as the store keeps them (core.Jobs.History). Owner-checked as health
// is; a range other than 1h or 24h is a 422.
func (h *handler) GetEndpointHistory(ctx context.Context, p oas.GetEndpointHistoryParams) (oas.GetEndpointHistoryRes, error) {
	t, err := h.anyEndpoint(ctx, p.EndpointId)
	if err != nil {
		return nil, err
	}
	hist, err := h.cfg.Jobs.History(ctx, t.ep.ID, p.Range.Or(""))
	if err != nil {
		return nil, err
	}
	out := oas.EndpointHistory{Range: hist.Range, StepSeconds: int(hist.Step.Seconds()),
		Buckets: make([]oas.HistoryBucket, len(hist.Buckets))}
	for i, b := range hist.Buckets {
		out.Buckets[i] = oas.HistoryBucket{Start: b.Start, Completed: b.Completed, Failed: b.Failed,
			TimedOut: b.TimedOut, Cancelled: b.Cancelled, Delay: historyTimes(b.Delay), Execution: historyTimes(b.Exec)}
	}
	return &oas.EndpointHistoryHeaders{Response: out}, nil
}

func historyTimes(t core.HistoryTimes) oas.HistoryTimes {
	return oas.HistoryTimes{Count: t.Count, MeanMs: t.Mean, P50Ms: t.P50, P90Ms: t.P90, P99Ms: t.P99}
}
