package scheduler

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

func placer(t *testing.T, pools ...core.PoolInfo) *Placer {
	t.Helper()
	var ps []pool.Pool
	for _, p := range pools {
		ps = append(ps, &fakePool{info: p})
	}
	pl, err := NewPlacer(ps)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func TestPlace(t *testing.T) {
	t.Parallel()
	pools := []core.PoolInfo{
		{ID: "A", GPUType: "A100", GPUs: 2, CUDAVersions: []string{"12.1", "12.2"}, DataCenter: "EU-1"},
		{ID: "B", GPUType: "H100", GPUs: 8, PerWorker: 4, CUDAVersions: []string{"12.4"}, DataCenter: "US-1"},
		{ID: "C", GPUType: "L4", GPUs: 4, CUDAVersions: []string{"12.2", "12.4"}, DataCenter: "US-2"},
	}
	for _, tc := range []struct {
		name      string
		want      Want
		pool      string // "" = none
		gpus      int
		reasonHas string
	}{
		{"first listed pool with room", Want{Pools: []string{"B", "A"}}, "B", 1, ""},
		{"order is the endpoint's", Want{Pools: []string{"A", "B"}}, "A", 1, ""},
		{"count", Want{Pools: []string{"A", "B"}, Count: 3}, "B", 3, ""},
		{"count over the per-worker max", Want{Pools: []string{"B"}, Count: 5}, "", 0, "at most 4 GPUs"},
		{"data center", Want{Pools: []string{"A", "B", "C"}, DataCenters: []string{"US-2"}}, "C", 1, ""},
		{"no allowed data center", Want{Pools: []string{"A"}, DataCenters: []string{"US-1"}}, "", 0, `data center "EU-1"`},
		{"CUDA exact", Want{Pools: []string{"A", "B", "C"}, CUDAVersions: []string{"12.4"}}, "B", 1, ""},
		{"CUDA any of", Want{Pools: []string{"B", "A"}, CUDAVersions: []string{"12.1", "11.8"}}, "A", 1, ""},
		{"CUDA none", Want{Pools: []string{"A", "C"}, CUDAVersions: []string{"12.3"}}, "", 0, "none of the allowed 12.3"},
		{"unknown pool", Want{Pools: []string{"Z"}}, "", 0, "Z: no such pool"},
	} {
		pl := placer(t, pools...)
		r, err := pl.Place(tc.want)
		switch {
		case tc.pool == "" && err == nil:
			t.Errorf("%s: Place(%+v) = %s; want no room", tc.name, tc.want, r.PoolID())
		case tc.pool == "":
			var nr *NoRoomError
			if !errors.As(err, &nr) || !strings.Contains(err.Error(), tc.reasonHas) {
				t.Errorf("%s: Place(%+v) error = %v; want a NoRoomError saying %q", tc.name, tc.want, err, tc.reasonHas)
			}
		case err != nil:
			t.Errorf("%s: Place(%+v) = %v; want pool %s", tc.name, tc.want, err, tc.pool)
		case r.PoolID() != tc.pool || len(r.GPUs) != tc.gpus:
			t.Errorf("%s: Place(%+v) = %s %v; want %s with %d GPUs", tc.name, tc.want, r.PoolID(), r.GPUs, tc.pool, tc.gpus)
		}
	}
}

func TestPlaceFillsThenFallsBackAndReleases(t *testing.T) {
	t.Parallel()
	pl := placer(t, core.PoolInfo{ID: "A", GPUs: 3}, core.PoolInfo{ID: "B", GPUs: 2})
	want := Want{Pools: []string{"A", "B"}, Count: 1}
	var got []string
	var rs []*Reservation
	for range 5 {
		r, err := pl.Place(want)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s%v", r.PoolID(), r.GPUs))
		rs = append(rs, r)
	}
	if w := []string{"A[0]", "A[1]", "A[2]", "B[0]", "B[1]"}; !slices.Equal(got, w) {
		t.Errorf("placements = %v; want %v", got, w)
	}
	_, err1 := pl.Place(want)
	if err1 == nil || !strings.Contains(err1.Error(), "A: 3 of 3 in use; B: 2 of 2 in use") {
		t.Errorf("Place on full pools = %v; want both full", err1)
	}
	// Two refusals that would say the same are the same without building their messages;
	// one that would say something else is not.
	_, err2 := pl.Place(want)
	_, err3 := pl.Place(Want{Pools: []string{"B", "A"}})
	if nr1, nr2, nr3 := err1.(*NoRoomError), err2.(*NoRoomError), err3.(*NoRoomError); !nr1.same(nr2) || nr1.same(nr3) || nr1.same(nil) {
		t.Errorf("same: %q vs %q vs %q; want the first two alike, the third not", nr1, nr2, nr3)
	}
	rs[1].Release()
	rs[1].Release() // twice is harmless
	if r, err := pl.Place(want); err != nil || r.PoolID() != "A" || !slices.Equal(r.GPUs, []int{1}) {
		t.Errorf("Place after a release = %v, %v; want A[1]", r, err)
	}
	if pl.Free("A") != 0 || pl.Free("B") != 0 {
		t.Errorf("free = %d, %d; want 0, 0", pl.Free("A"), pl.Free("B"))
	}
}

func TestWantOfPinsVolumeDataCenters(t *testing.T) {
	t.Parallel()
	dcs := map[string]string{"vol1": "EU-1"}
	dc := func(id string) (string, bool) { v, ok := dcs[id]; return v, ok }
	ep := &core.Endpoint{GPU: core.GPU{Pools: []string{"A"}, Count: 2}, NetworkVolumes: []string{"vol1"}}
	if w := WantOf(ep, dc); !slices.Equal(w.DataCenters, []string{"EU-1"}) || w.Count != 2 {
		t.Errorf("WantOf(volume in EU-1) = %+v; want data centers [EU-1], count 2", w)
	}
	ep.DataCenterIDs = []string{"US-1"}
	w := WantOf(ep, dc)
	pl := placer(t, core.PoolInfo{ID: "A", GPUs: 4, DataCenter: "EU-1"})
	if _, err := pl.Place(w); err == nil {
		t.Errorf("Place(volume in EU-1, dataCenterIds [US-1]) succeeded; want no room")
	}
}

// TestReserveConcurrently races placements and releases across pools: no pool is ever over
// its capacity, no device is handed to two workers, and everything is free at the end.
func TestReserveConcurrently(t *testing.T) {
	t.Parallel()
	var pools []core.PoolInfo
	for i := range 8 {
		pools = append(pools, core.PoolInfo{ID: fmt.Sprint("p", i), GPUs: 1 + i*20}) // 1..141 GPUs: multi-word bitmaps
	}
	pl := placer(t, pools...)
	var held [8][]atomic.Int32 // per pool, per device: holders now
	for i := range held {
		held[i] = make([]atomic.Int32, pools[i].GPUs)
	}
	var inUse [8]atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := []string{fmt.Sprint("p", g%8), fmt.Sprint("p", (g+3)%8), "p7"}
			var mine []*Reservation
			for i := range 3000 {
				if len(mine) > 0 && (i%3 == 0 || len(mine) > 20) {
					r := mine[0]
					mine = mine[1:]
					pi := slices.IndexFunc(pools, func(p core.PoolInfo) bool { return p.ID == r.PoolID() })
					for _, d := range r.GPUs {
						held[pi][d].Add(-1)
					}
					inUse[pi].Add(-int64(len(r.GPUs)))
					r.Release()
					continue
				}
				r, err := pl.Place(Want{Pools: order, Count: 1 + i%3})
				if err != nil {
					continue
				}
				pi := slices.IndexFunc(pools, func(p core.PoolInfo) bool { return p.ID == r.PoolID() })
				if n := inUse[pi].Add(int64(len(r.GPUs))); n > int64(pools[pi].GPUs) {
					t.Errorf("pool %s: %d GPUs reserved of %d", r.PoolID(), n, pools[pi].GPUs)
				}
				for _, d := range r.GPUs {
					if held[pi][d].Add(1) != 1 {
						t.Errorf("pool %s device %d handed out twice", r.PoolID(), d)
					}
				}
				mine = append(mine, r)
			}
			for _, r := range mine {
				pi := slices.IndexFunc(pools, func(p core.PoolInfo) bool { return p.ID == r.PoolID() })
				for _, d := range r.GPUs {
					held[pi][d].Add(-1)
				}
				inUse[pi].Add(-int64(len(r.GPUs)))
				r.Release()
			}
		}()
	}
	wg.Wait()
	for _, p := range pools {
		if f := pl.Free(p.ID); f != p.GPUs {
			t.Errorf("pool %s: %d free at the end; want %d", p.ID, f, p.GPUs)
		}
	}
}
