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

func TestLastLines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\n", 5, "a\nb\n"},
		{"", 3, ""},
		{"a\nb\n", 0, "a\nb\n"},
	} {
		if got := string(lastLines([]byte(tc.in), tc.n)); got != tc.want {
			t.Errorf("lastLines(%q, %d) = %q; want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
