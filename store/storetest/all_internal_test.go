package storetest

import (
	"strings"
	"testing"
)

// RunAll runs a port's suite only when the backend opens it, skips it only with the reason
// the backend gives, and fails on a port left without one: no suite is skipped unseen.
func TestVerdict(t *testing.T) {
	t.Parallel()
	lacks := map[string]string{"Leases": "one replica only", "Files": ""}
	for _, tc := range []struct {
		name        string
		implemented bool
		skip, fail  string // substrings; "" = none
	}{
		{"Endpoints", true, "", ""},
		{"Leases", false, "one replica only", ""},
		{"Jobs", false, "", "Backend.Lacks says not why"},
		{"Files", false, "", "Backend.Lacks says not why"}, // an empty reason is none
		{"Leases", true, "", "yet Lacks says it has none"},
	} {
		skip, fail := verdict(tc.name, tc.implemented, lacks)
		if (tc.skip == "") != (skip == "") || !strings.Contains(skip, tc.skip) {
			t.Errorf("verdict(%s, implemented %v): skip = %q; want one saying %q", tc.name, tc.implemented, skip, tc.skip)
		}
		if (tc.fail == "") != (fail == "") || !strings.Contains(fail, tc.fail) {
			t.Errorf("verdict(%s, implemented %v): fail = %q; want one saying %q", tc.name, tc.implemented, fail, tc.fail)
		}
	}
}
