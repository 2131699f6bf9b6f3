package api

import (
	"context"

	"github.com/go-faster/jx"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// ListModels implements listModels: the catalog of ready-made models.
func (h *handler) ListModels(ctx context.Context) (oas.ListModelsRes, error) {
	out := oas.ModelList{Items: []oas.Model{}}
	for _, m := range h.cfg.Models.List() {
		om := oas.Model{ID: m.ID, Name: m.Name, Type: oas.ModelType(m.Type), Description: m.Description,
			Parameters: make([]oas.ModelParameter, len(m.Params)), Output: make([]oas.ModelOutputField, len(m.Output)),
			Unit:  oas.BillingUnit{ID: m.Unit.ID, Description: m.Unit.Description},
			Price: oas.Price{Currency: oas.PriceCurrencyUSD, PerUnit: core.FormatMicros(m.PriceMicros), PerUnitMicros: m.PriceMicros}}
		for i, p := range m.Params {
			op := oas.ModelParameter{Name: p.Name, Type: oas.ModelParameterType(p.Type), Required: p.Required,
				Description: p.Description, Default: jx.Raw(p.Default)}
			if p.Type == "integer" {
				op.Minimum = oas.NewOptInt64(p.Min)
				if p.Max != 0 {
					op.Maximum = oas.NewOptInt64(p.Max)
				}
				if p.MultipleOf != 0 {
					op.MultipleOf = oas.NewOptInt64(p.MultipleOf)
				}
			}
			if p.MaxLength != 0 {
				op.MaxLength = oas.NewOptInt(p.MaxLength)
			}
			om.Parameters[i] = op
		}
		for i, f := range m.Output {
			om.Output[i] = oas.ModelOutputField{Name: f.Name, Type: f.Type, Description: f.Description}
		}
		out.Items = append(out.Items, om)
	}
	return &oas.ModelListHeaders{Response: out}, nil
}

// GetUsage implements getUsage: the caller's usage of ready-made models.
func (h *handler) GetUsage(ctx context.Context, p oas.GetUsageParams) (oas.GetUsageRes, error) {
	rep, f, err := h.cfg.Billing.Query(ctx, principalOf(ctx).User, core.UsageQuery{Model: p.Model.Or(""),
		From: p.From.Or(""), To: p.To.Or(""), Cursor: p.Cursor.Or(""), Limit: p.Limit.Or(100)})
	if err != nil {
		return nil, err
	}
	from, to := f.From, f.To
	out := oas.UsageReport{Items: make([]oas.UsageRecord, len(rep.Items)), Totals: []oas.UsageTotal{},
		Cost: core.FormatMicros(rep.CostMicros), CostMicros: rep.CostMicros, Currency: oas.UsageReportCurrencyUSD}
	if !from.IsZero() {
		out.From = oas.NewOptDateTime(from)
	}
	if !to.IsZero() {
		out.To = oas.NewOptDateTime(to)
	}
	if f.Model != "" {
		out.Model = oas.NewOptString(f.Model)
	}
	for i, u := range rep.Items {
		c := cost(&u.Charge)
		out.Items[i] = oas.UsageRecord{JobId: u.JobID, CompletedAt: u.At.UTC(), Model: c.Model, Unit: c.Unit,
			Measure: c.Measure, Quantity: c.Quantity, Units: c.Units, UnitPrice: c.UnitPrice, Cost: c.Cost,
			CostMicros: c.CostMicros, Currency: oas.UsageRecordCurrencyUSD}
	}
	for _, t := range rep.Totals {
		out.Totals = append(out.Totals, oas.UsageTotal{Model: t.Model, Unit: t.Unit, Jobs: t.Jobs,
			Units: core.FormatMicros(t.UnitsMicros), Cost: core.FormatMicros(t.CostMicros), CostMicros: t.CostMicros})
	}
	if rep.NextCursor != "" {
		out.NextCursor = oas.NewOptString(rep.NextCursor)
	}
	return &oas.UsageReportHeaders{Response: out}, nil
}

// cost renders a job's charge.
func cost(c *core.Charge) oas.JobCost {
	return oas.JobCost{Model: c.Model, Unit: c.Unit, Measure: c.Measure, Quantity: c.Quantity,
		Units: core.FormatMicros(c.UnitsMicros), UnitPrice: core.FormatMicros(c.PriceMicros),
		Cost: core.FormatMicros(c.CostMicros), CostMicros: c.CostMicros, Currency: oas.JobCostCurrencyUSD}
}
