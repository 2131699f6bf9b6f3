package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/gantryhq/gantry/oas"
)

// This file is `gantry usage`: the caller's usage of ready-made models.

// usageCmd runs `gantry usage`: the caller's usage of ready-made models, and its totals.
func (a *app) usageCmd(ctx context.Context, args []string) error {
	var model, from, to, cursor string
	var limit int
	return a.call("usage", "gantry usage [--model ID] [--from DATE] [--to DATE] [--limit N] [--cursor C]\n\nYour usage of ready-made models, one record per completed job, with totals.",
		args, nil, func(fs *flag.FlagSet) {
			fs.StringVar(&model, "model", "", "only this model's usage")
			fs.StringVar(&from, "from", "", "completed at or after (RFC 3339, or YYYY-MM-DD)")
			fs.StringVar(&to, "to", "", "completed before (RFC 3339, or YYYY-MM-DD for the end of that day)")
			fs.IntVar(&limit, "limit", 100, "records per page (1 to 1000)")
			fs.StringVar(&cursor, "cursor", "", "the next page's cursor")
		}, func(cn *conn, _ []string) error {
			u, err := answer[oas.UsageReportHeaders](cn.api.GetUsage(ctx, oas.GetUsageParams{Model: optString(model), From: optString(from),
				To: optString(to), Limit: oas.NewOptInt(limit), Cursor: optString(cursor)})).get(cn, "reading usage")
			if err != nil {
				return err
			}
			return a.printUsage(cn, &u.Response)
		})
}

// printUsage prints a usage report: its records, then its totals.
func (a *app) printUsage(cn *conn, r *oas.UsageReport) error {
	if err := cn.out.emit(r, func(t *table) {
		t.row("JOB", "COMPLETED", "MODEL", "UNITS", "UNIT", "COST")
		for _, it := range r.Items {
			t.row(it.JobId, when(it.CompletedAt), it.Model, it.Units, it.Unit, it.Cost+" "+string(it.Currency))
		}
		// The totals in the same columns: one row per model (over every record the filters
		// select, not only this page), and the sum when there are several models.
		for _, tot := range r.Totals {
			t.row("TOTAL", plural(tot.Jobs, "job"), tot.Model, tot.Units, tot.Unit, tot.Cost+" "+string(r.Currency))
		}
		if len(r.Totals) != 1 {
			t.row("TOTAL", "", "all models", "", "", r.Cost+" "+string(r.Currency))
		}
	}); err != nil {
		return err
	}
	if next, ok := r.NextCursor.Get(); ok && cn.out.format == "table" {
		fmt.Fprintf(a.stderr, "More records: gantry usage --cursor %s\n", next)
	}
	return nil
}

// plural is "1 job", "3 jobs".
func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.FormatInt(n, 10) + " " + what + "s"
}
