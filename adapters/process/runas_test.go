package process

import (
	"os/user"
	"testing"
)

// TestRunAs: who a pool's workers run as by default, as the server's euid allows.
func TestRunAs(t *testing.T) {
	t.Parallel()
	nobody := "nobody"
	if _, err := user.Lookup("nobody"); err != nil {
		nobody = "65534:65534"
	}
	for _, tc := range []struct {
		cfg  *Config
		euid int
		want string
	}{
		{nil, 0, nobody},
		{&Config{}, 0, nobody},
		{&Config{User: "gantry-worker"}, 0, "gantry-worker"},
		{nil, 1000, ""}, // the server's own: it can start no other
		{&Config{User: "gantry-worker"}, 1000, "gantry-worker"},
	} {
		if got := runAs(tc.cfg, tc.euid); got != tc.want {
			t.Errorf("runAs(%+v, %d) = %q; want %q", tc.cfg, tc.euid, got, tc.want)
		}
	}

}
