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
