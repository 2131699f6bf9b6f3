package pebble_test

import (
	"context"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/pebble"
	"github.com/gantryhq/gantry/store/storetest"
)

// open opens a store in dir and closes it when the test ends.
func open(t *testing.T, dir string) *pebble.Store {
	t.Helper()
	s, err := pebble.Open(dir)
	if err != nil {
		t.Fatalf("Open(%q) = %v; want nil", dir, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close() = %v; want nil", err)
		}
	})
	return s
}

func TestEndpointStore(t *testing.T) {
	t.Parallel()
	storetest.RunEndpointStore(t, func(t *testing.T) core.EndpointStore { return open(t, t.TempDir()) })
}

func TestTemplateStore(t *testing.T) {
	t.Parallel()
	storetest.RunTemplateStore(t, func(t *testing.T) core.TemplateStore { return open(t, t.TempDir()) })
}

func TestReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	created := time.Date(2025, time.May, 1, 12, 0, 0, 0, time.UTC)
	e := core.Endpoint{
		ID: "ep1", Owner: "alice", Name: "survivor", Type: core.TypeQueue,
		Container: core.Container{Image: "img:1", Env: map[string]string{"A": "1"}},
		CreatedAt: created, UpdatedAt: created,
	}
	tp := core.Template{
		ID: "tp1", Owner: "alice", Name: "kept", Container: core.Container{Image: "img:2"},
		CreatedAt: created, UpdatedAt: created,
	}
	gone := e
	gone.ID = "ep2"
	gone.CreatedAt = created.Add(time.Second)

	s, err := pebble.Open(dir)
	if err != nil {
		t.Fatalf("Open(%q) = %v; want nil", dir, err)
	}
	if err := s.PutEndpoint(ctx, e); err != nil {
		t.Fatalf("PutEndpoint(%q) = %v; want nil", e.ID, err)
	}
	if err := s.PutTemplate(ctx, tp); err != nil {
		t.Fatalf("PutTemplate(%q) = %v; want nil", tp.ID, err)
	}
	if err := s.PutEndpoint(ctx, gone); err != nil {
		t.Fatalf("PutEndpoint(%q) = %v; want nil", gone.ID, err)
	}
	if err := s.DeleteEndpoint(ctx, gone.ID); err != nil {
		t.Fatalf("DeleteEndpoint(%q) = %v; want nil", gone.ID, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v; want nil", err)
	}

	s = open(t, dir)
	gotE, err := s.GetEndpoint(ctx, e.ID)
	if err != nil || gotE.Name != e.Name || gotE.Env["A"] != "1" || !gotE.CreatedAt.Equal(created) {
		t.Errorf("GetEndpoint(%q) after reopen = %+v, %v; want %+v, nil", e.ID, gotE, err, e)
	}
	gotT, err := s.GetTemplate(ctx, tp.ID)
	if err != nil || gotT.Name != tp.Name || gotT.Image != tp.Image {
		t.Errorf("GetTemplate(%q) after reopen = %+v, %v; want %+v, nil", tp.ID, gotT, err, tp)
	}
	es, next, err := s.ListEndpoints(ctx, "alice", "", 10)
	if err != nil || next != "" || len(es) != 1 || es[0].ID != e.ID {
		t.Errorf("ListEndpoints(%q) after reopen = %v, %q, %v; want [%s], \"\", nil", "alice", es, next, err, e.ID)
	}
	ts, next, err := s.ListTemplates(ctx, "alice", "", 10)
	if err != nil || next != "" || len(ts) != 1 || ts[0].ID != tp.ID {
		t.Errorf("ListTemplates(%q) after reopen = %v, %q, %v; want [%s], \"\", nil", "alice", ts, next, err, tp.ID)
	}
}

func TestUsageStore(t *testing.T) {
	t.Parallel()
	storetest.RunUsageStore(t, func(t *testing.T) core.UsageStore { return open(t, t.TempDir()) })
}
