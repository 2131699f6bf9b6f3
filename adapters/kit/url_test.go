package kit

import "testing"

func TestRebaseURL(t *testing.T) {
	for _, c := range []struct{ in, base, want string }{
		{"http://127.0.0.1:8080/v2/ep/job-take/w1?gpu=H100", "https://gantry.example.com", "https://gantry.example.com/v2/ep/job-take/w1?gpu=H100"},
		{"http://127.0.0.1:8080/v2/ep/ping/w1?gpu=x", "http://gantry.gantry.svc:8080/prefix", "http://gantry.gantry.svc:8080/prefix/v2/ep/ping/w1?gpu=x"},
		{"http://127.0.0.1:8080", "https://g.example", "https://g.example"},
		{"not a url", "https://g.example", "not a url"},
	} {
		if got := RebaseURL(c.in, c.base); got != c.want {
			t.Errorf("RebaseURL(%q, %q) = %q; want %q", c.in, c.base, got, c.want)
		}
	}
	env := map[string]string{"RUNPOD_WEBHOOK_GET_JOB": "http://127.0.0.1:1/v2/e/job-take/w", "MODEL": "http://127.0.0.1:1/m"}
	got := RebaseEnv(env, "https://g.example")
	if got["RUNPOD_WEBHOOK_GET_JOB"] != "https://g.example/v2/e/job-take/w" || got["MODEL"] != env["MODEL"] {
		t.Errorf("RebaseEnv = %v; want only the worker-protocol URL rebased", got)
	}
	if env["RUNPOD_WEBHOOK_GET_JOB"] != "http://127.0.0.1:1/v2/e/job-take/w" {
		t.Error("RebaseEnv changed its argument")
	}
}
