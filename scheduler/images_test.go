package scheduler

import (
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// checkingPool is a fakePool that runs only the images it lists.
type checkingPool struct {
	*fakePool
	images []string
}

func (p checkingPool) CanRun(image string) (bool, string) {
	for _, i := range p.images {
		if i == image {
			return true, ""
		}
	}
	return false, "pool " + p.info.ID + " cannot run " + image
}

func TestPlacerCanRun(t *testing.T) {
	t.Parallel()
	pl, err := NewPlacer([]pool.Pool{
		checkingPool{&fakePool{info: core.PoolInfo{ID: "proc", GPUType: "CPU", GPUs: 1}}, []string{"a:1"}},
		&fakePool{info: core.PoolInfo{ID: "pulls", GPUType: "CPU", GPUs: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var _ core.ImageRunner = pl.CanRun
	for _, tc := range []struct {
		pool, image string
		ok          bool
		why         string
	}{
		{"proc", "a:1", true, ""},
		{"proc", "b:1", false, "pool proc cannot run b:1"},
		{"pulls", "b:1", true, ""},   // cannot tell: may run it
		{"unknown", "b:1", true, ""}, // the endpoint rules report an unknown pool
	} {
		if ok, why := pl.CanRun(tc.pool, tc.image); ok != tc.ok || why != tc.why {
			t.Errorf("CanRun(%q, %q) = %v, %q; want %v, %q", tc.pool, tc.image, ok, why, tc.ok, tc.why)
		}
	}
}
