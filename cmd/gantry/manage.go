package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/gantryhq/gantry/oas"
)

// endpointCmd runs `gantry endpoint create|list|get|update|delete`.
func (a *app) endpointCmd(ctx context.Context, args []string) error {
	sub, args, err := a.subcommand("endpoint", args, "create", "list", "get", "update", "delete")
	if err != nil {
		return err
	}
	fs := a.flagSet("endpoint "+sub, endpointUsage[sub])
	c := a.commonFlags(fs)
	var body *bodyFlags
	switch sub {
	case "create":
		body = addBodyFlags(fs, endpointFields)
	case "update":
		body = addBodyFlags(fs, without(endpointFields, "type", "template"))
	}
	limit := 0
	if sub == "list" {
		fs.IntVar(&limit, "limit", 0, "list at most this many (default: all)")
	}
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if sub == "list" {
		err = needArgs(fs, pos)
	} else if sub != "create" {
		err = needArgs(fs, pos, "ENDPOINT_ID")
	} else {
		err = needArgs(fs, pos)
	}
	if err != nil {
		return err
	}
	cn, err := a.connect(c)
	if err != nil {
		return err
	}
	switch sub {
	case "create":
		raw, err := body.body(a.stdin, endpointDefaults)
		if err != nil {
			return err
		}
		var req oas.CreateEndpointRequest
		if err := decodeBody(raw, &req); err != nil {
			return err
		}
		e, err := answer[oas.EndpointHeaders](cn.api.CreateEndpoint(ctx, &req)).get(cn, "creating the endpoint")
		if err != nil {
			return err
		}
		return cn.out.endpoints(&e.Response)
	case "list":
		all, err := listAll(limit, func(cursor string) ([]oas.Endpoint, oas.OptString, error) {
			page, err := answer[oas.EndpointListHeaders](cn.api.ListEndpoints(ctx, oas.ListEndpointsParams{
				Limit: oas.NewOptInt(100), Cursor: optString(cursor)})).get(cn, "listing endpoints")
			if err != nil {
				return nil, oas.OptString{}, err
			}
			return page.Response.Items, page.Response.NextCursor, nil
		})
		if err != nil {
			return err
		}
		return cn.out.endpoints(&oas.EndpointList{Items: all}, all...)
	case "get":
		e, err := answer[oas.EndpointHeaders](cn.api.GetEndpoint(ctx, oas.GetEndpointParams{EndpointId: pos[0]})).get(cn, "getting the endpoint")
		if err != nil {
			return err
		}
		return cn.out.endpoints(&e.Response)
	case "update":
		raw, err := body.body(a.stdin, func(m map[string]any) { scalingType(m) })
		if err != nil {
			return err
		}
		var req oas.UpdateEndpointRequest
		if err := decodeBody(raw, &req); err != nil {
			return err
		}
		e, err := answer[oas.EndpointHeaders](cn.api.UpdateEndpoint(ctx, &req, oas.UpdateEndpointParams{EndpointId: pos[0]})).get(cn, "updating the endpoint")
		if err != nil {
			return err
		}
		return cn.out.endpoints(&e.Response)
	}
	if _, err := answer[oas.DeleteEndpointNoContent](cn.api.DeleteEndpoint(ctx, oas.DeleteEndpointParams{EndpointId: pos[0]})).get(cn, "deleting the endpoint"); err != nil {
		return err
	}
	return cn.out.deleted("endpoint", pos[0])
}

var endpointUsage = map[string]string{
	"create": "gantry endpoint create --name NAME --image IMAGE --pool POOL [flags] | -f FILE\n\nCreates an endpoint; a flag for every field of the body (-f reads one as YAML or JSON,\nflags override it). Without --type and --scaling: a QUEUE endpoint scaling on a queue delay of 4 s.",
	"list":   "gantry endpoint list [--limit N]\n\nLists your endpoints, oldest first.",
	"get":    "gantry endpoint get ENDPOINT_ID",
	"update": "gantry endpoint update ENDPOINT_ID [flags] | -f FILE\n\nChanges the fields given; the others keep their values.",
	"delete": "gantry endpoint delete ENDPOINT_ID\n\nDeletes the endpoint; its queued jobs are cancelled.",
}

// endpointDefaults fills what a create leaves out: a QUEUE endpoint that scales on a queue
// delay of 4 s.
func endpointDefaults(m map[string]any) {
	if _, ok := m["type"]; !ok {
		m["type"] = "QUEUE"
	}
	if _, ok := m["scaling"]; !ok {
		m["scaling"] = map[string]any{"type": "QUEUE_DELAY", "queueDelay": 4.0}
	}
	scalingType(m)
}

// scalingType names the scaling type that --queue-delay or --request-count implies.
func scalingType(m map[string]any) {
	s, ok := m["scaling"].(map[string]any)
	if !ok {
		return
	}
	if _, ok := s["type"]; ok {
		return
	}
	switch {
	case s["queueDelay"] != nil:
		s["type"] = "QUEUE_DELAY"
	case s["requestCount"] != nil:
		s["type"] = "REQUEST_COUNT"
	}
}

// endpoints prints endpoints: v is what -o json prints, es the table's rows (v itself when
// none are given).
func (p *printer) endpoints(v interface{ MarshalJSON() ([]byte, error) }, es ...oas.Endpoint) error {
	if e, ok := v.(*oas.Endpoint); ok {
		es = []oas.Endpoint{*e}
	}
	return p.emit(v, func(t *table) {
		t.row("ID", "NAME", "TYPE", "IMAGE", "POOLS", "WORKERS", "SCALING", "CREATED")
		for _, e := range es {
			t.row(e.ID, e.Name, string(e.Type.Value), e.Image.Or(e.TemplateId.Or("")), strings.Join(e.Gpu.Value.Pools, ","),
				fmt.Sprintf("%d-%d", e.Workers.Min, e.Workers.Max), scaling(e.Scaling), when(e.CreatedAt))
		}
	})
}

func scaling(s oas.Scaling) string {
	if q, ok := s.GetQueueDelayScaling(); ok {
		return "QUEUE_DELAY " + strconv.FormatFloat(q.QueueDelay, 'f', -1, 64) + "s"
	}
	if r, ok := s.GetRequestCountScaling(); ok {
		return "REQUEST_COUNT " + strconv.Itoa(r.RequestCount)
	}
	return ""
}

// deleted says a resource was deleted: a line, or {"id": ..., "deleted": true}.
func (p *printer) deleted(what, id string) error {
	if p.format == "table" {
		_, err := fmt.Fprintf(p.w, "Deleted %s %s.\n", what, id)
		return err
	}
	return p.raw([]byte(fmt.Sprintf(`{"id":%q,"deleted":true}`, id)))
}

// templateCmd runs `gantry template create|list|get|update|delete`.
func (a *app) templateCmd(ctx context.Context, args []string) error {
	sub, args, err := a.subcommand("template", args, "create", "list", "get", "update", "delete")
	if err != nil {
		return err
	}
	fs := a.flagSet("template "+sub, templateUsage[sub])
	c := a.commonFlags(fs)
	var body *bodyFlags
	if sub == "create" || sub == "update" {
		body = addBodyFlags(fs, templateFields)
	}
	public := true
	if sub == "list" {
		fs.BoolVar(&public, "public", true, "also list the public templates (marked yes under PUBLIC); --public=false lists only yours")
	}
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if sub == "list" || sub == "create" {
		err = needArgs(fs, pos)
	} else {
		err = needArgs(fs, pos, "TEMPLATE_ID")
	}
	if err != nil {
		return err
	}
	cn, err := a.connect(c)
	if err != nil {
		return err
	}
	switch sub {
	case "create":
		raw, err := body.body(a.stdin, nil)
		if err != nil {
			return err
		}
		var req oas.CreateTemplateRequest
		if err := decodeBody(raw, &req); err != nil {
			return err
		}
		t, err := answer[oas.TemplateHeaders](cn.api.CreateTemplate(ctx, &req)).get(cn, "creating the template")
		if err != nil {
			return err
		}
		return cn.out.templates(&t.Response)
	case "list":
		all, err := listAll(0, func(cursor string) ([]oas.Template, oas.OptString, error) {
			page, err := answer[oas.TemplateListHeaders](cn.api.ListTemplates(ctx, oas.ListTemplatesParams{
				Limit: oas.NewOptInt(100), Cursor: optString(cursor)})).get(cn, "listing templates")
			if err != nil {
				return nil, oas.OptString{}, err
			}
			return page.Response.Items, page.Response.NextCursor, nil
		})
		if err != nil {
			return err
		}
		if public {
			pub, err := answer[oas.ListCatalogTemplatesOKHeaders](cn.api.ListCatalogTemplates(ctx)).get(cn, "listing the public templates")
			if err != nil {
				return err
			}
			all = append(all, pub.Response...)
		}
		return cn.out.templates(&oas.TemplateList{Items: all}, all...)
	case "get":
		t, err := answer[oas.TemplateHeaders](cn.api.GetTemplate(ctx, oas.GetTemplateParams{TemplateId: pos[0]})).get(cn, "getting the template")
		if err != nil {
			return err
		}
		return cn.out.templates(&t.Response)
	case "update":
		raw, err := body.body(a.stdin, nil)
		if err != nil {
			return err
		}
		var req oas.UpdateTemplateRequest
		if err := decodeBody(raw, &req); err != nil {
			return err
		}
		t, err := answer[oas.TemplateHeaders](cn.api.UpdateTemplate(ctx, &req, oas.UpdateTemplateParams{TemplateId: pos[0]})).get(cn, "updating the template")
		if err != nil {
			return err
		}
		return cn.out.templates(&t.Response)
	}
	if _, err := answer[oas.DeleteTemplateNoContent](cn.api.DeleteTemplate(ctx, oas.DeleteTemplateParams{TemplateId: pos[0]})).get(cn, "deleting the template"); err != nil {
		return err
	}
	return cn.out.deleted("template", pos[0])
}

var templateUsage = map[string]string{
	"create": "gantry template create --name NAME --image IMAGE [flags] | -f FILE\n\nCreates a template of your own; a flag for every field of the body.",
	"list":   "gantry template list [--public=false]\n\nLists your templates, then the public ones (PUBLIC yes) that endpoint create --template\ntakes too, such as gantry-echo.",
	"get":    "gantry template get TEMPLATE_ID",
	"update": "gantry template update TEMPLATE_ID [flags] | -f FILE",
	"delete": "gantry template delete TEMPLATE_ID",
}

func (p *printer) templates(v interface{ MarshalJSON() ([]byte, error) }, ts ...oas.Template) error {
	if t, ok := v.(*oas.Template); ok {
		ts = []oas.Template{*t}
	}
	return p.emit(v, func(t *table) {
		t.row("ID", "NAME", "IMAGE", "SERVERLESS", "PUBLIC", "CREATED")
		for _, tp := range ts {
			t.row(tp.ID, tp.Name, tp.Image, strconv.FormatBool(tp.IsServerless), yesNo(tp.IsPublic), when(tp.CreatedAt))
		}
	})
}

// flagSet returns a command's flag set, whose --help prints usage and the flags.
func (a *app) flagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("gantry "+name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() {
		fmt.Fprintf(a.stderr, "Usage: %s\n\nFlags:\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

func optString(s string) oas.OptString {
	if s == "" {
		return oas.OptString{}
	}
	return oas.NewOptString(s)
}

// listAll follows a list's cursor from the first page, stopping once it has limit items
// (0: all of them), and returns at most limit.
func listAll[T any](limit int, page func(cursor string) ([]T, oas.OptString, error)) ([]T, error) {
	var all []T
	cursor := ""
	for {
		items, next, err := page(cursor)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		c, more := next.Get()
		if !more || (limit > 0 && len(all) >= limit) {
			break
		}
		cursor = c
	}
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	return all, nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// catalogCmd runs `gantry catalog gpus|templates|cpus`: the public catalog lookups.
func (a *app) catalogCmd(ctx context.Context, args []string) error {
	sub, args, err := a.subcommand("catalog", args, "gpus", "templates", "cpus")
	if err != nil {
		return err
	}
	var avail bool
	return a.call("catalog "+sub, catalogUsage[sub], args, nil, func(fs *flag.FlagSet) {
		if sub == "gpus" {
			fs.BoolVar(&avail, "availability", false, "add the CUDA versions, the GPUs free now and the largest gpu count that fits")
		}
	}, func(cn *conn, _ []string) error { return catalogList(ctx, cn, sub, avail) })
}

// catalogList prints one catalog lookup: gpus (with availability: what is free now),
// templates or cpus.
func catalogList(ctx context.Context, cn *conn, sub string, avail bool) error {
	switch sub {
	case "gpus":
		var p oas.ListCatalogGpusParams
		if avail {
			p.Include = oas.NewOptListCatalogGpusInclude(oas.ListCatalogGpusIncludeAVAILABILITY)
		}
		g, err := answer[oas.ListCatalogGpusOKHeaders](cn.api.ListCatalogGpus(ctx, p)).get(cn, "listing the GPU types")
		if err != nil {
			return err
		}
		return cn.out.emit(jsonList{g.Response}, func(t *table) {
			head := []string{"POOL", "GPU TYPE", "MEMORY", "COUNT", "DATA CENTER"}
			if avail {
				head = append(head, "AVAILABLE", "MAX GPU COUNT", "CUDA")
			}
			t.row(append(head, "UNHEALTHY")...)
			for _, gt := range g.Response {
				mem := ""
				if v, ok := gt.MemoryInGb.Get(); ok {
					mem = strconv.Itoa(v) + " GB"
				}
				row := []string{gt.Pool, gt.ID, mem, strconv.Itoa(gt.Count), gt.DataCenterId}
				if avail {
					row = append(row, optInt(gt.Available), optInt(gt.MaxGpuCount), strings.Join(gt.CudaVersions, ","))
				}
				t.row(append(row, gt.Unhealthy.Or(""))...)
			}
		})
	case "templates":
		ts, err := answer[oas.ListCatalogTemplatesOKHeaders](cn.api.ListCatalogTemplates(ctx)).get(cn, "listing the public templates")
		if err != nil {
			return err
		}
		return cn.out.templates(jsonList{ts.Response}, ts.Response...)
	}
	cpus, err := answer[oas.ListCatalogCpusOKHeaders](cn.api.ListCatalogCpus(ctx)).get(cn, "listing the CPU flavors")
	if err != nil {
		return err
	}
	return cn.out.emit(jsonList{cpus.Response}, func(t *table) {
		t.row("ID", "NAME", "VCPU COUNTS", "GB PER VCPU", "POOL")
		for _, f := range cpus.Response {
			counts := make([]string, len(f.VcpuCounts))
			for i, n := range f.VcpuCounts {
				counts[i] = strconv.Itoa(n)
			}
			t.row(f.ID, f.DisplayName, strings.Join(counts, ","), strconv.Itoa(f.MemoryPerVcpu), f.Pool)
		}
	})
}

var catalogUsage = map[string]string{
	"gpus":      "gantry catalog gpus [--availability]\n\nThe GPU types of each serverless pool; the POOL column is what endpoint create --pool takes.",
	"templates": "gantry catalog templates\n\nThe public templates: endpoint create --template ID takes them.",
	"cpus":      "gantry catalog cpus\n\nThe CPU flavors.",
}

func optInt(v oas.OptInt) string {
	if n, ok := v.Get(); ok {
		return strconv.Itoa(n)
	}
	return ""
}

// jsonList is a catalog answer (a JSON array) for -o json and yaml: each item encodes as
// the generated type does (encoding/json calls its MarshalJSON).
type jsonList struct{ items any }

func (l jsonList) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(l.items)
	if string(b) == "null" {
		return []byte("[]"), err
	}
	return b, err
}
