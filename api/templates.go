package api

import (
	"context"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// This file is the template operations: create, list, get, update and delete.

// CreateTemplate implements createTemplate.
func (h *handler) CreateTemplate(ctx context.Context, req *oas.CreateTemplateRequest) (oas.CreateTemplateRes, error) {
	d := core.TemplateDraft{
		Name: req.Name, Image: req.Image, Args: optPtr(req.Args), Disk: optPtr(req.Disk),
		Ports: req.Ports, Env: req.Env.Or(nil), AllowedCudaVersions: req.AllowedCudaVersions,
		StartSSH: req.StartSsh.Or(false), StartJupyter: req.StartJupyter.Or(false),
		IsServerless: req.IsServerless.Or(false),
	}
	_, d.Registry = nilString(req.Registry)
	t, err := h.mgmt().CreateTemplate(ctx, principalOf(ctx).User, d)
	if err != nil {
		return nil, err
	}
	return &oas.TemplateHeaders{Response: template(&t)}, nil
}

// ListTemplates implements listTemplates.
func (h *handler) ListTemplates(ctx context.Context, params oas.ListTemplatesParams) (oas.ListTemplatesRes, error) {
	ts, next, err := h.mgmt().ListTemplates(ctx, principalOf(ctx).User, params.Cursor.Or(""), params.Limit.Or(50))
	if err != nil {
		return nil, err
	}
	out := oas.TemplateList{Items: make([]oas.Template, len(ts))}
	for i := range ts {
		out.Items[i] = template(&ts[i])
	}
	if next != "" {
		out.NextCursor = oas.NewOptString(next)
	}
	return &oas.TemplateListHeaders{Response: out}, nil
}

// GetTemplate implements getTemplate.
func (h *handler) GetTemplate(ctx context.Context, params oas.GetTemplateParams) (oas.GetTemplateRes, error) {
	t, err := h.mgmt().GetTemplate(ctx, principalOf(ctx).User, params.TemplateId)
	if err != nil {
		return nil, err
	}
	return &oas.TemplateHeaders{Response: template(&t)}, nil
}

// UpdateTemplate implements updateTemplate.
func (h *handler) UpdateTemplate(ctx context.Context, req *oas.UpdateTemplateRequest, params oas.UpdateTemplateParams) (oas.UpdateTemplateRes, error) {
	p := core.TemplatePatch{
		Name: optPtr(req.Name), Image: optPtr(req.Image), Args: optPtr(req.Args), Disk: optPtr(req.Disk),
		Ports: req.Ports, Env: req.Env.Or(nil), AllowedCudaVersions: req.AllowedCudaVersions,
		StartSSH: optPtr(req.StartSsh), StartJupyter: optPtr(req.StartJupyter), IsServerless: optPtr(req.IsServerless),
	}
	p.RegistrySet, p.Registry = nilString(req.Registry)
	t, err := h.mgmt().UpdateTemplate(ctx, principalOf(ctx).User, params.TemplateId, p)
	if err != nil {
		return nil, err
	}
	return &oas.TemplateHeaders{Response: template(&t)}, nil
}

// DeleteTemplate implements deleteTemplate.
func (h *handler) DeleteTemplate(ctx context.Context, params oas.DeleteTemplateParams) (oas.DeleteTemplateRes, error) {
	if err := h.mgmt().DeleteTemplate(ctx, principalOf(ctx).User, params.TemplateId); err != nil {
		return nil, err
	}
	return &oas.DeleteTemplateNoContent{}, nil
}
