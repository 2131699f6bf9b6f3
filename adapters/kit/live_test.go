package kit

import (
	"errors"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/pool"
)

func TestDevices(t *testing.T) {
	t.Parallel()
	d := NewDevices(3)
	for _, tc := range []struct {
		gpus []int
		err  string // "" = held
	}{
		{[]int{0, 2}, ""},
		{[]int{0, 1, 2, 1}, "4 devices asked of a pool of 3"},
		{[]int{3}, "device 3 is out of range"},
		{[]int{1, 1}, "device 1 asked twice"},
		{[]int{1, 2}, "device 2 is in use"},
		{[]int{1}, ""},
	} {
		err := d.Hold(tc.gpus)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, pool.ErrNoCapacity)) {
			t.Errorf("Hold(%v) = %v; want %q", tc.gpus, err, tc.err)
		}
	}
	d.Free([]int{0, 2})
	if err := d.Hold([]int{2, 0}); err != nil {
		t.Errorf("Hold after Free = %v", err)
	}
}

func TestLive(t *testing.T) {
	t.Parallel()
	l := NewLive[string](2)
	if err := l.Add("a", []int{0}, "worker a"); err != nil {
		t.Fatal(err)
	}
	if err := l.Add("a", []int{1}, "again"); err == nil || !strings.Contains(err.Error(), "already runs a worker with this id") {
		t.Errorf("a second Add of a live id = %v; want refused", err)
	}
	if err := l.Add("b", []int{0}, "worker b"); !errors.Is(err, pool.ErrNoCapacity) {
		t.Errorf("Add of a held device = %v; want pool.ErrNoCapacity", err)
	}
	if w, ok := l.Get("a"); !ok || w != "worker a" {
		t.Errorf("Get(a) = %q, %v", w, ok)
	}
	if _, ok := l.Get("b"); ok {
		t.Error("a refused Add registered its worker")
	}
	l.Remove("a", []int{0})
	if err := l.Add("b", []int{0, 1}, "worker b"); err != nil {
		t.Errorf("Add after Remove freed the device = %v", err)
	}
	if all := l.All(); len(all) != 1 || all[0] != "worker b" {
		t.Errorf("All = %v; want [worker b]", all)
	}
}
