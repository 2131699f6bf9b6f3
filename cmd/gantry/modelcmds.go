package main

import (
	"context"

	"github.com/gantryhq/gantry/oas"
)

// This file is `gantry model list`: the ready-made models.

// modelCmd runs `gantry model list`.
func (a *app) modelCmd(ctx context.Context, args []string) error {
	sub, args, err := a.subcommand("model", args, "list")
	if err != nil {
		return err
	}
	return a.call("model "+sub, "gantry model list\n\nThe ready-made models: run one with gantry run MODEL_ID --input '{...}'.", args, nil, nil,
		func(cn *conn, _ []string) error {
			ms, err := answer[oas.ModelListHeaders](cn.api.ListModels(ctx)).get(cn, "listing models")
			if err != nil {
				return err
			}
			return cn.out.emit(&ms.Response, func(t *table) {
				t.row("ID", "TYPE", "UNIT", "PRICE", "NAME")
				for _, m := range ms.Response.Items {
					t.row(m.ID, string(m.Type), m.Unit.ID, m.Price.PerUnit+" "+string(m.Price.Currency), m.Name)
				}
			})
		})
}
