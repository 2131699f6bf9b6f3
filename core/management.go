package core

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// EndpointStore keeps endpoints. List returns an owner's endpoints in creation order, starting
// after the cursor ("" = from the start), and the cursor of the next page ("" = no more). A
// call whose ctx is done returns an error that wraps ctx.Err() and writes nothing.
type EndpointStore interface {
	PutEndpoint(ctx context.Context, e Endpoint) error
	GetEndpoint(ctx context.Context, id string) (Endpoint, error) // ErrNotFound
	ListEndpoints(ctx context.Context, owner, cursor string, limit int) ([]Endpoint, string, error)
	DeleteEndpoint(ctx context.Context, id string) error // ErrNotFound
}

// TemplateStore keeps users' own templates, with the same listing contract as EndpointStore.
type TemplateStore interface {
	PutTemplate(ctx context.Context, t Template) error
	GetTemplate(ctx context.Context, id string) (Template, error) // ErrNotFound
	ListTemplates(ctx context.Context, owner, cursor string, limit int) ([]Template, string, error)
	DeleteTemplate(ctx context.Context, id string) error // ErrNotFound
}

// Clock tells the time; tests inject a fake one.
type Clock interface{ Now() time.Time }

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Management is the management plane: endpoints, templates and the catalog.
type Management struct {
	Endpoints EndpointStore
	Templates TemplateStore
	Catalog   *Catalog
	Clock     Clock
	// Volumes keeps users' network volumes and VolumeBackend their data (volumes.go); nil =
	// only the operator's volumes (the config file's) exist, and none can be created.
	Volumes       VolumeStore
	VolumeBackend VolumeBackend
	// OnDelete, when set, is called with the id of each deleted endpoint (the job engine
	// cancels its queued jobs), under the deleting request's context detached from its
	// cancellation.
	OnDelete func(ctx context.Context, endpointID string)
	// OnChange, when set, is called with each endpoint created or updated (the scheduler
	// applies a new scaling policy, worker bounds or GPU choice at once).
	OnChange func(Endpoint)

	// cache holds endpoints read or written through this Management (id -> Endpoint). Every
	// endpoint change goes through it, or, with replicas sharing the store, is told to it
	// (Forget), so it stays exact; job operations read their endpoint from it without
	// touching the store.
	cache sync.Map
	volMu sync.Mutex // serialises volume resizes and deletes on this replica (volumes.go)
}

func (m *Management) putEndpoint(ctx context.Context, e Endpoint) error {
	if err := m.Endpoints.PutEndpoint(ctx, e); err != nil {
		m.cache.Delete(e.ID)
		return err
	}
	m.cache.Store(e.ID, e)
	if m.OnChange != nil {
		m.OnChange(e)
	}
	return nil
}

// Forget drops what this Management knows of endpoint id ("" = of every endpoint), so that
// its next read goes to the store: replicas sharing a store call it for each change another
// replica made.
func (m *Management) Forget(id string) {
	if id == "" {
		m.cache.Clear()
		return
	}
	m.cache.Delete(id)
}

// NewID returns a random identifier of n characters from [a-z0-9].
func NewID(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// CreateEndpoint validates a create request, resolves its template, applies the defaults and
// stores the endpoint (spec 4.1).
func (m *Management) CreateEndpoint(ctx context.Context, owner string, d EndpointDraft) (Endpoint, error) {
	now := m.Clock.Now().UTC()
	e := Endpoint{
		ID:             NewID(14),
		Owner:          owner,
		Name:           d.Name,
		Type:           d.Type,
		TemplateID:     d.TemplateID,
		GPU:            GPU{Pools: d.GPU.Pools, Count: deref(d.GPU.Count, DefaultGPUCount)},
		Scaling:        d.Scaling,
		Workers:        Workers{Min: DefaultWorkersMin, Max: DefaultWorkersMax, IdleTimeout: DefaultIdleTimeout},
		DataCenterIDs:  orEmpty(d.DataCenterIDs),
		NetworkVolumes: orEmpty(d.NetworkVolumes),
		TimeoutMs:      deref(d.TimeoutMs, DefaultTimeoutMs),
		Flashboot:      deref(d.Flashboot, FlashbootOff),
		CreatedAt:      now,
		UpdatedAt:      now,
	}
	// Template rules 1-6: resolve at create time, body wins, env merged per key, CUDA seeded.
	cuda := d.AllowedCudaVersions
	if d.TemplateID != "" {
		t, err := m.template(ctx, owner, d.TemplateID)
		if err != nil {
			return Endpoint{}, err
		}
		if !t.IsServerless {
			return Endpoint{}, Invalid(FieldError{"$.templateId", fmt.Sprintf("template %q is not a serverless template", t.ID)})
		}
		e.Container = t.Container
		e.Container.Ports = slices.Clone(t.Ports)
		e.Container.Env = maps.Clone(t.Env)
		if cuda == nil {
			cuda = slices.Clone(t.AllowedCudaVersions)
		}
	}
	e.Image = deref(d.Image, e.Image)
	e.Args = deref(d.Args, e.Args)
	e.Disk = deref(d.Disk, e.Disk)
	if d.Ports != nil {
		e.Ports = d.Ports
	}
	if len(d.Env) > 0 {
		if e.Env == nil {
			e.Env = map[string]string{}
		}
		maps.Copy(e.Env, d.Env)
	}
	if d.RegistrySet {
		e.Registry = d.Registry
	}
	e.AllowedCudaVersions = orEmpty(cuda)

	idleGiven := false
	if w := d.Workers; w != nil {
		e.Workers.Min = deref(w.Min, e.Workers.Min)
		e.Workers.Max = deref(w.Max, e.Workers.Max)
		e.Workers.IdleTimeout = deref(w.IdleTimeout, e.Workers.IdleTimeout)
		idleGiven = w.IdleTimeout != nil
	}
	return m.checkAndStore(ctx, e, idleGiven)
}

// GetEndpoint returns the caller's endpoint; another user's endpoint is not found.
func (m *Management) GetEndpoint(ctx context.Context, owner, id string) (Endpoint, error) {
	if c, ok := m.cache.Load(id); ok {
		if e := c.(Endpoint); e.Owner == owner {
			return e, nil
		}
		return Endpoint{}, Errorf(KindNotFound, "endpoint %q not found", id)
	}
	e, err := m.Endpoints.GetEndpoint(ctx, id)
	if err == nil {
		m.cache.Store(id, e)
	}
	if errors.Is(err, ErrNotFound) || (err == nil && e.Owner != owner) {
		return Endpoint{}, Errorf(KindNotFound, "endpoint %q not found", id)
	}
	if err != nil {
		return Endpoint{}, Internal("reading the endpoint", err)
	}
	return e, nil
}

// ListEndpoints returns one page of the caller's endpoints.
func (m *Management) ListEndpoints(ctx context.Context, owner, cursor string, limit int) ([]Endpoint, string, error) {
	es, next, err := m.Endpoints.ListEndpoints(ctx, owner, cursor, limit)
	if err != nil {
		return nil, "", listError(err)
	}
	return es, next, nil
}

func listError(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return Internal("listing", err)
}

// BadCursor is the error stores return for a cursor they did not issue.
func BadCursor(cursor string) error {
	return Invalid(FieldError{"$.cursor", fmt.Sprintf("%q is not a cursor this list returned", cursor)})
}

// UpdateEndpoint applies a partial update; the result must pass every create rule.
func (m *Management) UpdateEndpoint(ctx context.Context, owner, id string, p EndpointPatch) (Endpoint, error) {
	e, err := m.GetEndpoint(ctx, owner, id)
	if err != nil {
		return Endpoint{}, err
	}
	if p.Name != nil {
		e.Name = *p.Name
	}
	if p.GPU != nil {
		e.GPU = GPU{Pools: p.GPU.Pools, Count: deref(p.GPU.Count, e.GPU.Count)}
	}
	wasApplying := e.IdleTimeoutApplies()
	if p.Scaling != nil {
		e.Scaling = *p.Scaling
	}
	e.Image = deref(p.Image, e.Image)
	e.Args = deref(p.Args, e.Args)
	e.Disk = deref(p.Disk, e.Disk)
	if p.Ports != nil {
		e.Ports = p.Ports
	}
	if p.Env != nil {
		e.Env = p.Env
	}
	if p.RegistrySet {
		e.Registry = p.Registry
	}
	idleGiven := false
	if w := p.Workers; w != nil {
		e.Workers.Min = deref(w.Min, e.Workers.Min)
		e.Workers.Max = deref(w.Max, e.Workers.Max)
		e.Workers.IdleTimeout = deref(w.IdleTimeout, e.Workers.IdleTimeout)
		idleGiven = w.IdleTimeout != nil
	}
	if !wasApplying && e.IdleTimeoutApplies() && e.Workers.IdleTimeout == 0 {
		e.Workers.IdleTimeout = DefaultIdleTimeout // switched away from QUEUE + REQUEST_COUNT
	}
	if p.DataCenterIDs != nil {
		e.DataCenterIDs = p.DataCenterIDs
	}
	if p.NetworkVolumes != nil {
		e.NetworkVolumes = p.NetworkVolumes
	}
	e.TimeoutMs = deref(p.TimeoutMs, e.TimeoutMs)
	e.Flashboot = deref(p.Flashboot, e.Flashboot)
	if p.AllowedCudaVersions != nil {
		e.AllowedCudaVersions = p.AllowedCudaVersions
	}
	e.UpdatedAt = m.Clock.Now().UTC()
	return m.checkAndStore(ctx, e, idleGiven)
}

// DeleteEndpoint removes the caller's endpoint.
func (m *Management) DeleteEndpoint(ctx context.Context, owner, id string) error {
	if _, err := m.GetEndpoint(ctx, owner, id); err != nil {
		return err
	}
	m.cache.Delete(id)
	if err := m.Endpoints.DeleteEndpoint(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
		return Internal("deleting the endpoint", err)
	}
	if m.OnDelete != nil {
		// The endpoint is gone: its queue is purged even if the request is cut meanwhile.
		m.OnDelete(context.WithoutCancel(ctx), id)
	}
	return nil
}

// template resolves a template the caller may use: their own or a public one.
func (m *Management) template(ctx context.Context, owner, id string) (Template, error) {
	if t, ok := m.Catalog.PublicTemplate(id); ok {
		return t, nil
	}
	t, err := m.Templates.GetTemplate(ctx, id)
	if errors.Is(err, ErrNotFound) || (err == nil && t.Owner != owner) {
		return Template{}, Errorf(KindNotFound, "template %q not found", id)
	}
	if err != nil {
		return Template{}, Internal("reading the template", err)
	}
	return t, nil
}

// GetTemplate returns the caller's own template or a public one.
func (m *Management) GetTemplate(ctx context.Context, owner, id string) (Template, error) {
	return m.template(ctx, owner, id)
}

// ownTemplate returns a template the caller owns; public templates cannot be changed.
func (m *Management) ownTemplate(ctx context.Context, owner, id string) (Template, error) {
	t, err := m.template(ctx, owner, id)
	if err == nil && t.IsPublic {
		return Template{}, Errorf(KindForbidden, "template %q is a public catalog template and cannot be changed", id)
	}
	return t, err
}

// CreateTemplate stores a new template of the caller's.
func (m *Management) CreateTemplate(ctx context.Context, owner string, d TemplateDraft) (Template, error) {
	now := m.Clock.Now().UTC()
	t := Template{
		ID:    NewID(10),
		Owner: owner,
		Name:  d.Name,
		Container: Container{
			Image: d.Image, Args: deref(d.Args, ""), Disk: deref(d.Disk, 0),
			Ports: d.Ports, Env: d.Env, Registry: d.Registry,
		},
		AllowedCudaVersions: d.AllowedCudaVersions,
		StartSSH:            d.StartSSH,
		StartJupyter:        d.StartJupyter,
		IsServerless:        d.IsServerless,
		CreatedAt:           now,
		UpdatedAt:           now,
	}
	if errs := append(checkNames(t.Name, &t.Container), checkContainer(&t.Container, "is required")...); len(errs) > 0 {
		return Template{}, Invalid(errs...)
	}
	if err := m.Templates.PutTemplate(ctx, t); err != nil {
		return Template{}, Internal("storing the template", err)
	}
	return t, nil
}

// ListTemplates returns one page of the caller's own templates.
func (m *Management) ListTemplates(ctx context.Context, owner, cursor string, limit int) ([]Template, string, error) {
	ts, next, err := m.Templates.ListTemplates(ctx, owner, cursor, limit)
	if err != nil {
		return nil, "", listError(err)
	}
	return ts, next, nil
}

// UpdateTemplate applies a partial update to the caller's template. Endpoints created from it
// keep their snapshot (template rule 5).
func (m *Management) UpdateTemplate(ctx context.Context, owner, id string, p TemplatePatch) (Template, error) {
	t, err := m.ownTemplate(ctx, owner, id)
	if err != nil {
		return Template{}, err
	}
	t.Name = deref(p.Name, t.Name)
	t.Image = deref(p.Image, t.Image)
	t.Args = deref(p.Args, t.Args)
	t.Disk = deref(p.Disk, t.Disk)
	if p.Ports != nil {
		t.Ports = p.Ports
	}
	if p.Env != nil {
		t.Env = p.Env
	}
	if p.RegistrySet {
		t.Registry = p.Registry
	}
	if p.AllowedCudaVersions != nil {
		t.AllowedCudaVersions = p.AllowedCudaVersions
	}
	t.StartSSH = deref(p.StartSSH, t.StartSSH)
	t.StartJupyter = deref(p.StartJupyter, t.StartJupyter)
	t.IsServerless = deref(p.IsServerless, t.IsServerless)
	if errs := append(checkNames(t.Name, &t.Container), checkContainer(&t.Container, "is required")...); len(errs) > 0 {
		return Template{}, Invalid(errs...)
	}
	t.UpdatedAt = m.Clock.Now().UTC()
	if err := m.Templates.PutTemplate(ctx, t); err != nil {
		return Template{}, Internal("storing the template", err)
	}
	return t, nil
}

// DeleteTemplate removes the caller's template.
func (m *Management) DeleteTemplate(ctx context.Context, owner, id string) error {
	if _, err := m.ownTemplate(ctx, owner, id); err != nil {
		return err
	}
	if err := m.Templates.DeleteTemplate(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
		return Internal("deleting the template", err)
	}
	return nil
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// orEmpty returns s, or an empty non-nil slice for nil (lists always render as []).
func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// PlatformOwner owns the endpoints of ready-made models. It is not a valid user name ('@' is
// refused in user names), so no API key can belong to it and no user can manage its endpoints.
const PlatformOwner = "@gantry"

// JobEndpoint resolves the endpoint of a job operation for user: their own endpoint, or a
// platform endpoint (a ready-made model's), which every user may run jobs on. shared reports the
// latter: its jobs belong to whoever submitted them. Anything else is not found.
func (m *Management) JobEndpoint(ctx context.Context, user, id string) (e Endpoint, shared bool, err error) {
	e, err = m.GetEndpoint(ctx, user, id)
	if err == nil || KindOf(err) != KindNotFound { // KindOf allocates; every job call passes here

		return e, false, err
	}
	if p, perr := m.GetEndpoint(ctx, PlatformOwner, id); perr == nil {
		return p, true, nil
	}
	return Endpoint{}, false, err
}

// PutPlatformEndpoint creates or replaces the platform endpoint e (e.Owner must be
// PlatformOwner; e.ID is chosen by the caller, a model slug). It must pass every create rule;
// CreatedAt is kept from the stored endpoint when there is one.
func (m *Management) PutPlatformEndpoint(ctx context.Context, e Endpoint) (Endpoint, error) {
	if e.Owner != PlatformOwner {
		return Endpoint{}, Errorf(KindInvalid, "endpoint %q is not owned by %s", e.ID, PlatformOwner)
	}
	now := m.Clock.Now().UTC()
	old, err := m.Endpoints.GetEndpoint(ctx, e.ID)
	switch {
	case err == nil && old.Owner != PlatformOwner:
		return Endpoint{}, Errorf(KindConflict, "endpoint id %q already belongs to user %q", e.ID, old.Owner)
	case err == nil:
		e.CreatedAt = old.CreatedAt
	case errors.Is(err, ErrNotFound):
		e.CreatedAt = now
	default:
		return Endpoint{}, Internal("reading the endpoint", err)
	}
	e.UpdatedAt = now
	e.DataCenterIDs, e.NetworkVolumes, e.AllowedCudaVersions = orEmpty(e.DataCenterIDs), orEmpty(e.NetworkVolumes), orEmpty(e.AllowedCudaVersions)
	return m.checkAndStore(ctx, e, e.Workers.IdleTimeout != 0 && !e.IdleTimeoutApplies())
}

// checkAndStore applies every endpoint rule to e (idleGiven: the request set
// workers.idleTimeout), drops an idleTimeout that does not apply, and stores it.
func (m *Management) checkAndStore(ctx context.Context, e Endpoint, idleGiven bool) (Endpoint, error) {
	vols, err := m.endpointVolumes(ctx, e.Owner, e.NetworkVolumes)
	if err != nil {
		return Endpoint{}, err
	}
	if errs := append(checkNames(e.Name, &e.Container), checkRules(&e, idleGiven, m.Catalog, vols)...); len(errs) > 0 {
		return Endpoint{}, Invalid(errs...)
	}
	if !e.IdleTimeoutApplies() {
		e.Workers.IdleTimeout = 0
	}
	if err := m.putEndpoint(ctx, e); err != nil {
		return Endpoint{}, Internal("storing the endpoint", err)
	}
	return e, nil
}

// PlatformEndpoints returns every platform endpoint.
func (m *Management) PlatformEndpoints(ctx context.Context) ([]Endpoint, error) {
	var all []Endpoint
	cursor := ""
	for {
		es, next, err := m.Endpoints.ListEndpoints(ctx, PlatformOwner, cursor, MaxEndpointsPerPage)
		if err != nil {
			return nil, listError(err)
		}
		all = append(all, es...)
		if next == "" {
			return all, nil
		}
		cursor = next
	}
}

// DeletePlatformEndpoint removes a platform endpoint (a model dropped from the catalog): its
// workers stop and its queued jobs are cancelled.
func (m *Management) DeletePlatformEndpoint(ctx context.Context, id string) error {
	return m.DeleteEndpoint(ctx, PlatformOwner, id)
}
