package core_test

import (
	"slices"
	"testing"

	"github.com/gantryhq/gantry/core"
)

func TestSortCUDAVersions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   []string
		want []string
		ok   bool
	}{
		{[]string{"12.4", "11.8", "12.10", "12.4", "012.2"}, []string{"11.8", "12.2", "12.4", "12.10"}, true},
		{nil, nil, true},
		{[]string{"12"}, nil, false},
		{[]string{"12.x"}, nil, false},
		{[]string{"-1.2"}, nil, false},
	} {
		got, err := core.SortCUDAVersions(tc.in)
		if (err == nil) != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("SortCUDAVersions(%q) = %q, %v; want %q (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestGPUsPerWorkerMaxIgnoresCapacityNow checks that a pool whose capacity changes (Total) still
// takes workers of its size while it has no room: the per-worker limit comes from its
// description.
func TestGPUsPerWorkerMaxIgnoresCapacityNow(t *testing.T) {
	t.Parallel()
	cat := core.NewCatalog([]core.PoolInfo{{ID: "elastic", GPUs: 8, PerWorker: 4}, {ID: "fixed", GPUs: 2}, {ID: "grown", GPUs: 1, PerWorker: 8}}, nil, nil)
	cat.Total = func(id string) int {
		if id == "grown" {
			return 16 // a cluster with more GPUs than declared
		}
		return 0
	}
	for id, want := range map[string]int{"elastic": 4, "fixed": 2, "grown": 8, "unknown": 0} {
		if got := cat.GPUsPerWorkerMax(id); got != want {
			t.Errorf("GPUsPerWorkerMax(%s) with no capacity now = %d; want %d", id, got, want)
		}
	}
	if p, _ := cat.Pool("elastic"); p.GPUs != 0 {
		t.Errorf("Pool(elastic).GPUs = %d; want the capacity now, 0", p.GPUs)
	}
}
