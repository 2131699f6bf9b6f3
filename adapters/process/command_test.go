package process

import (
	"strings"
	"testing"
)

func TestCommand(t *testing.T) {
	t.Parallel()
	c := commands{self: "/bin/gantry", builtins: []string{"echo"}, images: map[string][]string{"my/img:1": {"python3", "h.py"}}}
	for _, tc := range []struct {
		image string
		want  string
		err   string
	}{
		{"gantry/echo", "/bin/gantry worker echo", ""},
		{"my/img:1", "python3 h.py", ""},
		{"gantry/nope", "", `no command for image "gantry/nope"`},
		{"other:2", "", "known: gantry/echo, my/img:1"},
	} {
		argv, err := c.command(tc.image)
		if got := strings.Join(argv, " "); got != tc.want || (tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err))) {
			t.Errorf("command(%q) = %q, %v; want %q, error containing %q", tc.image, got, err, tc.want, tc.err)
		}
	}
}
