package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// This file is the network volume service (issue 30): users' volumes in a VolumeStore, the
// operator's from the config file, their storage through a VolumeBackend, and the rules of
// ownership, resizing and deletion.

// Volume types, RunPod's. Gantry keeps the type as given; every pool stores both alike.
const (
	VolumeStandard        = "STANDARD"
	VolumeHighPerformance = "HIGH_PERFORMANCE"
)

// VolumeStore keeps users' network volumes, with the listing contract of EndpointStore
// (an owner's volumes in creation order, by cursor).
type VolumeStore interface {
	PutVolume(ctx context.Context, v Volume) error
	GetVolume(ctx context.Context, id string) (Volume, error) // ErrNotFound
	ListVolumes(ctx context.Context, owner, cursor string, limit int) ([]Volume, string, error)
	DeleteVolume(ctx context.Context, id string) error // ErrNotFound
}

// VolumeBackend is where volumes' data lives: for each data center, the pool the config says
// stores its volumes. The composition root wires it to the pools.
type VolumeBackend interface {
	// StoragePool returns the id of the pool that stores data center dc's volumes, or an
	// error saying why none can.
	StoragePool(dc string) (string, error)
	// EnsureVolume makes v's storage, or grows it to v.SizeGB; DeleteVolume removes it and
	// its data; VolumeUsage reports the bytes it holds (-1 if the storage cannot tell).
	EnsureVolume(ctx context.Context, v Volume) error
	DeleteVolume(ctx context.Context, v Volume) error
	VolumeUsage(ctx context.Context, v Volume) (int64, error)
	// VolumeWarning returns what pool poolID says of the volumes its workers see when it
	// cannot mount them at VolumeMountPath ("" when it can, or the pool is unknown).
	VolumeWarning(poolID string) string
}

// VolumeDraft is a create request for a volume.
type VolumeDraft struct {
	Name       string
	SizeGB     int
	DataCenter string
	Type       string // "" = STANDARD
}

// VolumePatch is a partial update of a volume. DataCenter and Type are immutable: a patch
// naming them is refused.
type VolumePatch struct {
	Name       *string
	SizeGB     *int
	DataCenter *string
	Type       *string
}

// OperatorVolumes returns the volumes the config file declares, as volumes without an owner.
func (c *Catalog) OperatorVolumes() []Volume {
	out := make([]Volume, len(c.volumes))
	for i, v := range c.volumes {
		out[i] = operatorVolume(v)
	}
	return out
}

func operatorVolume(v NetworkVolume) Volume {
	return Volume{ID: v.ID, Name: v.ID, SizeGB: v.SizeGB, DataCenter: v.DataCenter, Type: VolumeStandard}
}

// volumeLimit is the page size the service lists a store's volumes with.
const volumeLimit = 100

func (m *Management) volumeStore() (VolumeStore, error) {
	if m.Volumes == nil {
		return nil, Errorf(KindUnavailable, "this server keeps no network volumes")
	}
	return m.Volumes, nil
}

// Volume returns any volume by id, whoever owns it: for the scheduler, which mounts the
// volumes of endpoints that passed the ownership rules. ErrNotFound when there is none.
func (m *Management) Volume(ctx context.Context, id string) (Volume, error) {
	if v, ok := m.Catalog.NetworkVolume(id); ok {
		return operatorVolume(v), nil
	}
	if m.Volumes == nil {
		return Volume{}, ErrNotFound
	}
	return m.Volumes.GetVolume(ctx, id)
}

// GetVolume returns an operator volume or the caller's own; another user's is not found.
func (m *Management) GetVolume(ctx context.Context, owner, id string) (Volume, error) {
	if v, ok := m.Catalog.NetworkVolume(id); ok {
		return operatorVolume(v), nil
	}
	st, err := m.volumeStore()
	if err != nil {
		return Volume{}, Errorf(KindNotFound, "network volume %q not found", id)
	}
	v, err := st.GetVolume(ctx, id)
	if errors.Is(err, ErrNotFound) || (err == nil && v.Owner != owner) {
		return Volume{}, Errorf(KindNotFound, "network volume %q not found", id)
	}
	if err != nil {
		return Volume{}, Unavailable("reading the network volume", err)
	}
	return v, nil
}

// ListVolumes returns the operator's volumes, then the caller's, oldest first.
func (m *Management) ListVolumes(ctx context.Context, owner string) ([]Volume, error) {
	out := m.Catalog.OperatorVolumes()
	if m.Volumes == nil {
		return out, nil
	}
	cursor := ""
	for {
		vs, next, err := m.Volumes.ListVolumes(ctx, owner, cursor, volumeLimit)
		if err != nil {
			return nil, listError(err)
		}
		out = append(out, vs...)
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

// VolumeUsage returns the bytes v holds, when its storage can tell.
func (m *Management) VolumeUsage(ctx context.Context, v Volume) (int64, bool) {
	if m.VolumeBackend == nil {
		return 0, false
	}
	n, err := m.VolumeBackend.VolumeUsage(ctx, v)
	return n, err == nil && n >= 0
}

// storageError is the answer to a request whose volume storage failed: nothing changed.
func storageError(what string, v Volume, pool string, err error) *Error {
	return &Error{Kind: KindUnavailable, Err: err,
		Detail: fmt.Sprintf("%s: pool %s, which stores the network volumes of data center %s, failed: %v", what, pool, v.DataCenter, err)}
}

// CreateVolume makes a volume of the caller's: its storage first, then its record.
func (m *Management) CreateVolume(ctx context.Context, owner string, d VolumeDraft) (Volume, error) {
	st, err := m.volumeStore()
	if err != nil {
		return Volume{}, err
	}
	v := Volume{ID: NewID(10), Owner: owner, Name: d.Name, SizeGB: d.SizeGB, DataCenter: d.DataCenter,
		Type: volumeType(d.Type), CreatedAt: m.Clock.Now().UTC()}
	var errs []FieldError
	add := func(path, format string, args ...any) {
		errs = append(errs, FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if strings.TrimSpace(v.Name) == "" {
		add("$.name", "must not be empty")
	} else if msg := nameProblem(v.Name); msg != "" { // the rule of every name clients print
		add("$.name", "%s", msg)
	}
	if v.SizeGB < MinVolumeGB || v.SizeGB > MaxVolumeGB {
		add("$.size", "must be between %d and %d GB (got %d)", MinVolumeGB, MaxVolumeGB, v.SizeGB)
	}
	pool := ""
	switch {
	case !m.Catalog.HasDataCenter(v.DataCenter):
		add("$.dataCenter", "unknown data center %q (see GET /v2/catalog/gpus)", v.DataCenter)
	case m.VolumeBackend == nil:
		add("$.dataCenter", "no pool of this server can store network volumes")
	default:
		if pool, err = m.VolumeBackend.StoragePool(v.DataCenter); err != nil {
			add("$.dataCenter", "%v", err)
		}
	}
	if v.Type != VolumeStandard && v.Type != VolumeHighPerformance {
		add("$.type", "must be STANDARD or HIGH_PERFORMANCE (got %q)", v.Type)
	}
	if len(errs) > 0 {
		return Volume{}, Invalid(errs...)
	}
	if err := m.VolumeBackend.EnsureVolume(ctx, v); err != nil {
		return Volume{}, storageError("the volume's storage could not be made; nothing was created", v, pool, err)
	}
	if err := st.PutVolume(ctx, v); err != nil {
		_ = m.VolumeBackend.DeleteVolume(context.WithoutCancel(ctx), v) // not recorded: no storage either
		return Volume{}, Unavailable("storing the network volume", err)
	}
	return v, nil
}

// ownVolume returns a volume the caller owns; operator volumes cannot be changed.
func (m *Management) ownVolume(ctx context.Context, owner, id string) (Volume, error) {
	if _, ok := m.Catalog.NetworkVolume(id); ok {
		return Volume{}, Errorf(KindForbidden, "network volume %q is provided by the operator (the server's config file): it cannot be changed or deleted through the API", id)
	}
	return m.GetVolume(ctx, owner, id)
}

// UpdateVolume renames or grows the caller's volume. A resize grows the storage first; if
// that fails, nothing changes.
func (m *Management) UpdateVolume(ctx context.Context, owner, id string, p VolumePatch) (Volume, error) {
	m.volMu.Lock()
	defer m.volMu.Unlock()
	st, err := m.volumeStore()
	if err != nil {
		return Volume{}, err
	}
	v, err := m.ownVolume(ctx, owner, id)
	if err != nil {
		return Volume{}, err
	}
	var bad []FieldError
	if p.DataCenter != nil {
		bad = append(bad, FieldError{"$.dataCenter", fmt.Sprintf("is immutable: the volume stays in data center %s; create a new volume to move data", v.DataCenter)})
	}
	if p.Type != nil {
		bad = append(bad, FieldError{"$.type", fmt.Sprintf("is immutable: the volume stays %s", v.Type)})
	}
	if p.SizeGB != nil && *p.SizeGB < v.SizeGB {
		bad = append(bad, FieldError{"$.size", fmt.Sprintf("a network volume only grows: it has %d GB, so the size must be at least %d (got %d)", v.SizeGB, v.SizeGB, *p.SizeGB)})
	}
	if len(bad) > 0 {
		e := Invalid(bad...)
		e.Kind = KindMalformed // 400, as RunPod answers a shrink
		return Volume{}, e
	}
	var errs []FieldError
	if p.Name != nil && strings.TrimSpace(*p.Name) == "" {
		errs = append(errs, FieldError{"$.name", "must not be empty"})
	} else if p.Name != nil {
		if msg := nameProblem(*p.Name); msg != "" {
			errs = append(errs, FieldError{"$.name", msg})
		}
	}
	if p.SizeGB != nil && *p.SizeGB > MaxVolumeGB {
		errs = append(errs, FieldError{"$.size", fmt.Sprintf("must be at most %d GB (got %d)", MaxVolumeGB, *p.SizeGB)})
	}
	if len(errs) > 0 {
		return Volume{}, Invalid(errs...)
	}
	next := v
	next.Name = deref(p.Name, v.Name)
	next.SizeGB = deref(p.SizeGB, v.SizeGB)
	if next.SizeGB > v.SizeGB {
		if m.VolumeBackend == nil {
			return Volume{}, Errorf(KindUnavailable, "no pool of this server stores network volumes now")
		}
		pool, err := m.VolumeBackend.StoragePool(v.DataCenter)
		if err != nil {
			return Volume{}, &Error{Kind: KindUnavailable, Detail: "the volume cannot be resized now: " + err.Error()}
		}
		if err := m.VolumeBackend.EnsureVolume(ctx, next); err != nil {
			return Volume{}, storageError(fmt.Sprintf("the volume's storage could not grow to %d GB; it keeps %d GB", next.SizeGB, v.SizeGB), v, pool, err)
		}
	}
	if err := st.PutVolume(ctx, next); err != nil {
		return Volume{}, Unavailable("storing the network volume", err)
	}
	return next, nil
}

// DeleteVolume removes the caller's volume and its data. It is refused while an endpoint of
// the caller's names the volume; if the storage cannot be removed, the volume stays.
func (m *Management) DeleteVolume(ctx context.Context, owner, id string) error {
	m.volMu.Lock()
	defer m.volMu.Unlock()
	st, err := m.volumeStore()
	if err != nil {
		return err
	}
	v, err := m.ownVolume(ctx, owner, id)
	if err != nil {
		return err
	}
	users, err := m.endpointsNaming(ctx, owner, id)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return Errorf(KindConflict, "network volume %q is named by endpoint(s) %s: remove it from their networkVolumes (or delete them) first", id, strings.Join(users, ", "))
	}
	if m.VolumeBackend != nil {
		pool, perr := m.VolumeBackend.StoragePool(v.DataCenter)
		if perr != nil {
			return &Error{Kind: KindUnavailable, Detail: "the volume's data cannot be removed now, so the volume stays: " + perr.Error()}
		}
		if err := m.VolumeBackend.DeleteVolume(ctx, v); err != nil {
			return storageError("the volume's data could not be removed, so the volume stays", v, pool, err)
		}
	}
	if err := st.DeleteVolume(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
		return Unavailable("deleting the network volume", err)
	}
	return nil
}

// endpointsNaming returns the ids of owner's endpoints that name volume id.
func (m *Management) endpointsNaming(ctx context.Context, owner, id string) ([]string, error) {
	var out []string
	cursor := ""
	for {
		es, next, err := m.Endpoints.ListEndpoints(ctx, owner, cursor, MaxEndpointsPerPage)
		if err != nil {
			return nil, listError(err)
		}
		for _, e := range es {
			if slices.Contains(e.NetworkVolumes, id) {
				out = append(out, e.ID)
			}
		}
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

// endpointVolumes resolves the volumes an endpoint of owner's names: operator volumes and the
// owner's own. Another user's volume, like an unknown one, is missing from the result.
func (m *Management) endpointVolumes(ctx context.Context, owner string, ids []string) (map[string]Volume, error) {
	out := map[string]Volume{}
	for _, id := range ids {
		if v, ok := m.Catalog.NetworkVolume(id); ok {
			out[id] = operatorVolume(v)
			continue
		}
		if m.Volumes == nil {
			continue
		}
		v, err := m.Volumes.GetVolume(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return nil, Unavailable("reading the endpoint's network volumes", err)
		case v.Owner == owner:
			out[id] = v
		}
	}
	return out, nil
}

// VolumeWarnings returns what the pools e's workers may land on say of its network volumes:
// those that cannot mount them at VolumeMountPath say what they do instead.
func (m *Management) VolumeWarnings(ctx context.Context, e *Endpoint) []string {
	if len(e.NetworkVolumes) == 0 || m.VolumeBackend == nil {
		return nil
	}
	vols, err := m.endpointVolumes(ctx, e.Owner, e.NetworkVolumes)
	if err != nil {
		return nil
	}
	var out []string
	for _, id := range e.GPU.Pools {
		p, ok := m.Catalog.Pool(id)
		if !ok {
			continue
		}
		in := false
		for _, v := range vols {
			in = in || v.DataCenter == p.DataCenter
		}
		if w := m.VolumeBackend.VolumeWarning(id); in && w != "" {
			out = append(out, fmt.Sprintf("pool %s: %s", id, w))
		}
	}
	return out
}

func volumeType(t string) string {
	if t == "" {
		return VolumeStandard
	}
	return t
}
