package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gantryhq/gantry/core"
)

// fakeVolumes stores the volumes of EU-RO-1 in pool a100-eu and those of US-TX-3 in h100-us;
// LOCAL (the CPU pool's) stores none. Calls are recorded; fail makes them fail.
type fakeVolumes struct {
	mu      sync.Mutex
	sizes   map[string]int // volume id -> GB ensured
	deleted []string
	fail    error  // every Ensure and Delete fails with it
	warn    string // what pool a100-eu says of mounting volumes
}

func newFakeVolumes() *fakeVolumes { return &fakeVolumes{sizes: map[string]int{}} }

func (f *fakeVolumes) StoragePool(dc string) (string, error) {
	switch dc {
	case "EU-RO-1":
		return "a100-eu", nil
	case "US-TX-3":
		return "h100-us", nil
	}
	return "", fmt.Errorf("no pool in data center %s can store network volumes", dc)
}

func (f *fakeVolumes) EnsureVolume(_ context.Context, v core.Volume) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.sizes[v.ID] = v.SizeGB
	return nil
}

func (f *fakeVolumes) DeleteVolume(_ context.Context, v core.Volume) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	delete(f.sizes, v.ID)
	f.deleted = append(f.deleted, v.ID)
	return nil
}

func (f *fakeVolumes) VolumeUsage(_ context.Context, v core.Volume) (int64, error) {
	return 4096, nil
}

func (f *fakeVolumes) VolumeWarning(pool string) string {
	if pool == "a100-eu" {
		return f.warn
	}
	return ""
}

func (f *fakeVolumes) size(id string) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.sizes[id]
	return n, ok
}

func (f *fakeVolumes) setFail(err error) {
	f.mu.Lock()
	f.fail = err
	f.mu.Unlock()
}

func volumeSetup(t *testing.T) (*env, *fakeVolumes) {
	t.Helper()
	fv := newFakeVolumes()
	return setup(t, setupOpts{quota: core.Quota{Minute: 1000, Hour: 10000, Day: 100000}, volumes: fv}), fv
}

// createVolume creates a volume as key and returns its id, failing the test unless 201.
func (e *env) createVolume(key, body string) string {
	e.t.Helper()
	r := e.as(key, "POST", "/v2/network-volumes", body)
	if r.status != http.StatusCreated {
		e.t.Fatalf("create volume %s = %d %s; want 201", body, r.status, r.body)
	}
	return r.json(e.t)["id"].(string)
}

// volumeIDs lists the ids of the volumes key sees.
func (e *env) volumeIDs(t *testing.T, key string) []string {
	t.Helper()
	r := e.as(key, "GET", "/v2/network-volumes", "")
	if r.status != 200 {
		t.Fatalf("list volumes = %d %s", r.status, r.body)
	}
	var ids []string
	for _, v := range r.json(t)["networkVolumes"].([]any) {
		ids = append(ids, v.(map[string]any)["id"].(string))
	}
	return ids
}

func TestNetworkVolumeLifecycle(t *testing.T) {
	t.Parallel()
	e, fv := volumeSetup(t)
	r := e.as(e.alice, "POST", "/v2/network-volumes", `{"name":"weights","size":50,"dataCenter":"EU-RO-1"}`)
	if r.status != 201 {
		t.Fatalf("create = %d %s; want 201", r.status, r.body)
	}
	m := r.json(t)
	id, _ := m["id"].(string)
	want := map[string]any{"name": "weights", "size": 50.0, "dataCenter": "EU-RO-1", "type": "STANDARD", "operator": false}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("created %s = %#v; want %#v", k, m[k], v)
		}
	}
	if n, ok := fv.size(id); !ok || n != 50 {
		t.Errorf("storage after create = %d, %v; want 50 GB ensured before the answer", n, ok)
	}

	if ids := e.volumeIDs(t, e.alice); !slices.Equal(ids, []string{"vol-eu", id}) {
		t.Errorf("list = %v; want the operator's vol-eu, then %s", ids, id)
	}
	// A read key reads volumes but changes none.
	if ids := e.volumeIDs(t, e.read); !slices.Equal(ids, []string{"vol-eu", id}) {
		t.Errorf("list with a read key = %v", ids)
	}
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/v2/network-volumes", `{"name":"r","size":10,"dataCenter":"EU-RO-1"}`},
		{"PATCH", "/v2/network-volumes/" + id, `{"size":60}`},
		{"DELETE", "/v2/network-volumes/" + id, ""},
	} {
		if r := e.as(e.read, req.method, req.path, req.body); r.status != 403 {
			t.Errorf("%s %s with a read key = %d %s; want 403", req.method, req.path, r.status, r.body)
		}
	}
	r = e.as(e.alice, "GET", "/v2/network-volumes/"+id, "")
	if r.status != 200 || r.json(t)["usedBytes"] != 4096.0 || r.json(t)["size"] != 50.0 {
		t.Errorf("get = %d %s; want 200 with size 50 and usedBytes 4096", r.status, r.body)
	}

	r = e.as(e.alice, "PATCH", "/v2/network-volumes/"+id, `{"size":100,"name":"weights-2"}`)
	if r.status != 200 || r.json(t)["size"] != 100.0 || r.json(t)["name"] != "weights-2" {
		t.Fatalf("resize = %d %s; want 200 with size 100", r.status, r.body)
	}
	if n, _ := fv.size(id); n != 100 {
		t.Errorf("storage after resize = %d GB; want 100", n)
	}
	r = e.as(e.alice, "PATCH", "/v2/network-volumes/"+id, `{"size":100}`)
	if r.status != 200 {
		t.Errorf("resize to the same size = %d %s; want 200", r.status, r.body)
	}

	r = e.as(e.alice, "DELETE", "/v2/network-volumes/"+id, "")
	if r.status != 204 {
		t.Fatalf("delete = %d %s; want 204", r.status, r.body)
	}
	if _, ok := fv.size(id); ok || !slices.Contains(fv.deleted, id) {
		t.Errorf("the storage of a deleted volume was not removed (deleted %v)", fv.deleted)
	}
	if r := e.as(e.alice, "GET", "/v2/network-volumes/"+id, ""); r.status != 404 {
		t.Errorf("get after delete = %d %s; want 404", r.status, r.body)
	}
	if r := e.as(e.alice, "DELETE", "/v2/network-volumes/"+id, ""); r.status != 404 {
		t.Errorf("second delete = %d %s; want 404", r.status, r.body)
	}
}

func TestNetworkVolumeValidation(t *testing.T) {
	t.Parallel()
	e, _ := volumeSetup(t)
	id := e.createVolume(e.alice, `{"name":"v","size":50,"dataCenter":"EU-RO-1","type":"HIGH_PERFORMANCE"}`)
	path := "/v2/network-volumes/" + id
	tests := []struct {
		name, method, path, body string
		status                   int
		errors                   []string // each must be one of the problem's errors, whole or as a prefix
	}{
		{"size too small", "POST", "/v2/network-volumes", `{"name":"v","size":9,"dataCenter":"EU-RO-1"}`, 422, []string{"$.size: must be at least 10 (got 9)"}},
		{"size too large", "POST", "/v2/network-volumes", `{"name":"v","size":4097,"dataCenter":"EU-RO-1"}`, 422, []string{"$.size: must be at most 4096 (got 4097)"}},
		{"name required", "POST", "/v2/network-volumes", `{"size":10,"dataCenter":"EU-RO-1"}`, 422, []string{"$.name: is required"}},
		{"name empty", "POST", "/v2/network-volumes", `{"name":"","size":10,"dataCenter":"EU-RO-1"}`, 422, []string{"$.name: must not be empty"}},
		{"name with a terminal escape", "POST", "/v2/network-volumes", `{"name":"w\u001b]0;pwned\u0007","size":10,"dataCenter":"EU-RO-1"}`, 422, []string{"$.name: holds the control character U+001B at byte 1"}},
		{"rename to a newline", "PATCH", path, `{"name":"a\nb"}`, 422, []string{"$.name: holds the control character U+000A at byte 1"}},
		{"dataCenter required", "POST", "/v2/network-volumes", `{"name":"v","size":10}`, 422, []string{"$.dataCenter: is required"}},
		{"unknown property", "POST", "/v2/network-volumes", `{"name":"v","size":10,"dataCenter":"EU-RO-1","owner":"bob"}`, 422, []string{"$.owner: unknown property"}},
		{"unknown data center", "POST", "/v2/network-volumes", `{"name":"v","size":10,"dataCenter":"MARS-1"}`, 422, []string{`$.dataCenter: unknown data center "MARS-1"`}},
		{"data center without volume storage", "POST", "/v2/network-volumes", `{"name":"v","size":10,"dataCenter":"LOCAL"}`, 422, []string{"$.dataCenter: no pool in data center LOCAL can store network volumes"}},
		{"bad type", "POST", "/v2/network-volumes", `{"name":"v","size":10,"dataCenter":"EU-RO-1","type":"FAST"}`, 422, []string{"$.type: "}},
		{"empty patch", "PATCH", path, `{}`, 422, []string{"$: "}},
		{"shrink", "PATCH", path, `{"size":40}`, 400, []string{"$.size: a network volume only grows: it has 50 GB, so the size must be at least 50 (got 40)"}},
		{"patch size over the maximum", "PATCH", path, `{"size":5000}`, 422, []string{"$.size: must be at most 4096 (got 5000)"}},
		{"dataCenter immutable", "PATCH", path, `{"dataCenter":"US-TX-3"}`, 400, []string{"$.dataCenter: is immutable"}},
		{"type immutable", "PATCH", path, `{"type":"STANDARD"}`, 400, []string{"$.type: is immutable"}},
		{"patch unknown property", "PATCH", path, `{"owner":"bob"}`, 422, []string{"$.owner: unknown property"}},
		{"get unknown", "GET", "/v2/network-volumes/nosuchvolume", "", 404, nil},
		{"patch unknown", "PATCH", "/v2/network-volumes/nosuchvolume", `{"name":"x"}`, 404, nil},
		{"delete unknown", "DELETE", "/v2/network-volumes/nosuchvolume", "", 404, nil},
	}
	for _, tc := range tests {
		r := e.as(e.alice, tc.method, tc.path, tc.body)
		if r.status != tc.status {
			t.Errorf("%s: %s %s = %d %s; want %d", tc.name, tc.method, tc.body, r.status, r.body, tc.status)
			continue
		}
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: Content-Type = %q; want application/problem+json", tc.name, ct)
		}
		got := r.errors(t)
		for _, w := range tc.errors {
			if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
				t.Errorf("%s: errors = %q; want one starting %q", tc.name, got, w)
			}
		}
	}
	// Nothing the refused requests asked for happened.
	if r := e.as(e.alice, "GET", path, ""); r.json(t)["size"] != 50.0 || r.json(t)["dataCenter"] != "EU-RO-1" || r.json(t)["type"] != "HIGH_PERFORMANCE" {
		t.Errorf("after refused patches: %s; want size 50 in EU-RO-1, HIGH_PERFORMANCE", r.body)
	}
	if ids := e.volumeIDs(t, e.alice); len(ids) != 2 {
		t.Errorf("volumes after refused creates = %v; want vol-eu and %s only", ids, id)
	}
}

func TestNetworkVolumeOwnership(t *testing.T) {
	t.Parallel()
	e, fv := volumeSetup(t)
	id := e.createVolume(e.alice, `{"name":"alice's","size":20,"dataCenter":"EU-RO-1"}`)
	path := "/v2/network-volumes/" + id

	if ids := e.volumeIDs(t, e.bob); !slices.Equal(ids, []string{"vol-eu"}) {
		t.Errorf("bob's list = %v; want only the operator's vol-eu", ids)
	}
	for _, req := range []struct{ method, body string }{{"GET", ""}, {"PATCH", `{"size":30}`}, {"DELETE", ""}} {
		if r := e.as(e.bob, req.method, path, req.body); r.status != 404 {
			t.Errorf("bob %s alice's volume = %d %s; want 404", req.method, r.status, r.body)
		}
	}
	if n, ok := fv.size(id); !ok || n != 20 {
		t.Errorf("alice's volume after bob's requests: %d GB, kept %v; want 20 GB, kept", n, ok)
	}

	// Bob cannot mount it: on create, on update, and through v1's networkVolumeId.
	body := with(`{"networkVolumes":["` + id + `"]}`)
	want := fmt.Sprintf(`$.networkVolumes[0]: unknown network volume %q`, id)
	if r := e.as(e.bob, "POST", "/v2/serverless", body); r.status != 422 || !slices.Contains(r.errors(t), want) {
		t.Errorf("bob creates an endpoint naming alice's volume = %d %s; want 422 %s", r.status, r.body, want)
	}
	r := e.as(e.bob, "POST", "/v2/serverless", minimalQueue)
	if r.status != 201 {
		t.Fatalf("bob's endpoint = %d %s", r.status, r.body)
	}
	bobEP := r.json(t)["id"].(string)
	if r := e.as(e.bob, "PATCH", "/v2/serverless/"+bobEP, `{"networkVolumes":["vol-eu","`+id+`"]}`); r.status != 422 ||
		!slices.Contains(r.errors(t), fmt.Sprintf(`$.networkVolumes[1]: unknown network volume %q`, id)) {
		t.Errorf("bob updates his endpoint to name alice's volume = %d %s; want 422 at $.networkVolumes[1]", r.status, r.body)
	}
	v1 := `{"name":"v1","templateId":"tpl-pub","gpuTypeIds":["NVIDIA A100 80GB PCIe"],"networkVolumeId":"` + id + `"}`
	if r := e.as(e.bob, "POST", "/v1/endpoints", v1); r.status != 422 || !strings.Contains(r.body, "$.networkVolumeId") {
		t.Errorf("bob's v1 endpoint naming alice's volume = %d %s; want 422 at $.networkVolumeId", r.status, r.body)
	}

	// Alice can, and both may name the operator's volume.
	if r := e.as(e.alice, "POST", "/v2/serverless", body); r.status != 201 {
		t.Errorf("alice creates an endpoint naming her volume = %d %s; want 201", r.status, r.body)
	}
	if r := e.as(e.alice, "POST", "/v1/endpoints", v1); r.status != 200 {
		t.Errorf("alice's v1 endpoint naming her volume = %d %s; want 200", r.status, r.body)
	}
	if r := e.as(e.bob, "PATCH", "/v2/serverless/"+bobEP, `{"networkVolumes":["vol-eu"]}`); r.status != 200 {
		t.Errorf("bob names the operator's volume = %d %s; want 200", r.status, r.body)
	}
}

func TestNetworkVolumeInUse(t *testing.T) {
	t.Parallel()
	e, fv := volumeSetup(t)
	id := e.createVolume(e.alice, `{"name":"v","size":20,"dataCenter":"EU-RO-1"}`)
	ep1 := e.create(with(`{"networkVolumes":["` + id + `"]}`))
	ep2 := e.create(with(`{"networkVolumes":["vol-eu","` + id + `"]}`))
	e.create(minimalQueue) // names no volume

	r := e.as(e.alice, "DELETE", "/v2/network-volumes/"+id, "")
	if r.status != 409 || !strings.Contains(r.body, ep1) || !strings.Contains(r.body, ep2) {
		t.Fatalf("delete while in use = %d %s; want 409 naming %s and %s", r.status, r.body, ep1, ep2)
	}
	if _, ok := fv.size(id); !ok {
		t.Fatal("a refused delete removed the volume's storage")
	}
	if r := e.as(e.alice, "PATCH", "/v2/serverless/"+ep1, `{"networkVolumes":[]}`); r.status != 200 {
		t.Fatalf("unnaming = %d %s", r.status, r.body)
	}
	if r := e.as(e.alice, "DELETE", "/v2/serverless/"+ep2, ""); r.status != 204 {
		t.Fatalf("endpoint delete = %d %s", r.status, r.body)
	}
	if r := e.as(e.alice, "DELETE", "/v2/network-volumes/"+id, ""); r.status != 204 {
		t.Errorf("delete once no endpoint names it = %d %s; want 204", r.status, r.body)
	}
}

func TestNetworkVolumeOperatorReadOnly(t *testing.T) {
	t.Parallel()
	e, fv := volumeSetup(t)
	for _, key := range []string{e.alice, e.bob} {
		r := e.as(key, "GET", "/v2/network-volumes/vol-eu", "")
		if m := r.json(t); r.status != 200 || m["operator"] != true || m["dataCenter"] != "EU-RO-1" {
			t.Errorf("get vol-eu = %d %s; want 200, operator", r.status, r.body)
		}
		for _, req := range []struct{ method, body string }{{"PATCH", `{"size":20}`}, {"PATCH", `{"name":"mine"}`}, {"DELETE", ""}} {
			r := e.as(key, req.method, "/v2/network-volumes/vol-eu", req.body)
			if r.status != 403 || !strings.Contains(r.body, "provided by the operator") {
				t.Errorf("%s vol-eu = %d %s; want 403 saying the operator provides it", req.method, r.status, r.body)
			}
		}
	}
	if len(fv.deleted) > 0 {
		t.Errorf("storage deleted: %v", fv.deleted)
	}
}

func TestNetworkVolumeStorageFailure(t *testing.T) {
	t.Parallel()
	e, fv := volumeSetup(t)
	id := e.createVolume(e.alice, `{"name":"v","size":20,"dataCenter":"EU-RO-1"}`)
	fv.setFail(errors.New("disk full"))

	r := e.as(e.alice, "POST", "/v2/network-volumes", `{"name":"w","size":20,"dataCenter":"EU-RO-1"}`)
	if r.status != 503 || !strings.Contains(r.body, "disk full") || !strings.Contains(r.body, "a100-eu") {
		t.Errorf("create when the storage fails = %d %s; want 503 saying why", r.status, r.body)
	}
	if ids := e.volumeIDs(t, e.alice); len(ids) != 2 {
		t.Errorf("volumes after a failed create = %v; want vol-eu and %s", ids, id)
	}
	r = e.as(e.alice, "PATCH", "/v2/network-volumes/"+id, `{"size":40}`)
	if r.status != 503 || !strings.Contains(r.body, "disk full") {
		t.Errorf("resize when the storage fails = %d %s; want 503 saying why", r.status, r.body)
	}
	if r := e.as(e.alice, "GET", "/v2/network-volumes/"+id, ""); r.json(t)["size"] != 20.0 {
		t.Errorf("after a failed resize: %s; want size 20", r.body)
	}
	r = e.as(e.alice, "DELETE", "/v2/network-volumes/"+id, "")
	if r.status != 503 || !strings.Contains(r.body, "disk full") || !strings.Contains(r.body, "stays") {
		t.Errorf("delete when the storage fails = %d %s; want 503 saying the volume stays", r.status, r.body)
	}
	if ids := e.volumeIDs(t, e.alice); !slices.Contains(ids, id) {
		t.Errorf("volumes after a failed delete = %v; want %s still listed", ids, id)
	}
}

func TestNetworkVolumeWarning(t *testing.T) {
	t.Parallel()
	e, fv := volumeSetup(t)
	fv.warn = "without root, the worker gets the volume's path in RUNPOD_VOLUME_PATH, not at /runpod-volume"
	r := e.as(e.alice, "POST", "/v2/serverless", with(`{"networkVolumes":["vol-eu"]}`))
	if r.status != 201 {
		t.Fatalf("create = %d %s", r.status, r.body)
	}
	want := `299 - "pool a100-eu: ` + fv.warn + `"`
	if got := r.header.Values("Warning"); !slices.Equal(got, []string{want}) {
		t.Errorf("Warning = %q; want %q", got, want)
	}
	id := r.json(t)["id"].(string)
	if r := e.as(e.alice, "PATCH", "/v2/serverless/"+id, `{"name":"renamed"}`); !slices.Equal(r.header.Values("Warning"), []string{want}) {
		t.Errorf("update: Warning = %q; want %q", r.header.Values("Warning"), want)
	}
	// An endpoint without a volume, or whose volumes are elsewhere, is not warned.
	if r := e.as(e.alice, "POST", "/v2/serverless", minimalQueue); r.header.Get("Warning") != "" {
		t.Errorf("no volume: Warning = %q; want none", r.header.Get("Warning"))
	}
}
