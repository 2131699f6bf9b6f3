package server_test

import (
	"context"
	"testing"

	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/store/memq"
)

// OpenStores opens every port of the embedded backend in the data directory, none that only
// replicas need, and Close releases them all: the directory opens again (Pebble's lock is
// free).
func TestOpenStoresEmbedded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := server.Config{Data: t.TempDir()}
	for range 2 {
		st, err := server.OpenStores(ctx, cfg, nil)
		if err != nil {
			t.Fatalf("OpenStores = %v; want nil", err)
		}
		for name, missing := range map[string]bool{
			"Endpoints": st.Endpoints == nil, "Templates": st.Templates == nil, "Source": st.Source == nil,
			"Keys": st.Keys == nil, "Usage": st.Usage == nil, "History": st.History == nil,
			"Files": st.Files == nil, "FileKey": len(st.FileKey) == 0, "Tokens": st.Tokens == nil,
			"Limits": st.Limits == nil, "Pebble": st.Pebble == nil,
		} {
			if missing {
				t.Errorf("Stores.%s is unset", name)
			}
		}
		if st.Leases != nil || st.Check != nil {
			t.Errorf("Stores.Leases, Check = %v, %v; want nil on the embedded store (one replica)", st.Leases, st.Check != nil)
		}
		if _, ok := st.Endpoints.(server.EndpointFollower); ok {
			t.Error("the embedded endpoint store is an EndpointFollower; want not (one replica)")
		}
		if _, err := st.Jobs(ctx, memq.Options{}); err != nil {
			t.Fatalf("Stores.Jobs = %v; want nil", err)
		}
		st.Close()
	}
}
