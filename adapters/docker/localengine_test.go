package docker

import "testing"

// TestLocalEngine: a docker pool keeps volumes under the data directory by default only when
// its engine is this machine's.
func TestLocalEngine(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	for host, want := range map[string]string{"": "/d/volumes", "unix:///var/run/docker.sock": "/d/volumes", "tcp://gpu-1:2376": ""} {
		if got := localEngine(host, "/d/volumes"); got != want {
			t.Errorf("localEngine(%q) = %q; want %q", host, got, want)
		}
	}
	t.Setenv("DOCKER_HOST", "ssh://gpu-1")
	if got := localEngine("", "/d/volumes"); got != "" {
		t.Errorf("localEngine with DOCKER_HOST=ssh://gpu-1 = %q; want none", got)
	}
}
