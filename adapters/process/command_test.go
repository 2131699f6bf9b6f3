package process

import (
	"strings"
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
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

func TestCanRun(t *testing.T) {
	t.Parallel()
	p, err := New(Config{Pool: core.PoolInfo{ID: "local", GPUType: "CPU", GPUs: 2, CPU: true}, Self: "/bin/gantry",
		Builtins: []string{"echo", "text"}, Images: map[string][]string{"my/img:1": {"python3", "h.py"}, "gantry/text": {"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	var _ pool.ImageChecker = p
	for _, tc := range []struct {
		image string
		ok    bool
		why   string
	}{
		{"gantry/echo", true, ""},
		{"gantry/text", true, ""},
		{"my/img:1", true, ""},
		{"other:2", false, `pool local (process) has no images: entry for "other:2"; map it to the command that runs it under images: in the config file (images: {"other:2": [python3, handler.py]}), or use a built-in image (gantry/echo)`},
		{"gantry/nope", false, `pool local (process) has no images: entry for "gantry/nope"`},
	} {
		ok, why := p.CanRun(tc.image)
		if ok != tc.ok || !strings.HasPrefix(why, tc.why) || (tc.why == "" && why != "") {
			t.Errorf("CanRun(%q) = %v, %q; want %v, %q", tc.image, ok, why, tc.ok, tc.why)
		}
	}
}
