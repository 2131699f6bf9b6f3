package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// TestConfigErrors: a config mistake is refused naming the file, the line and the YAML key
// path (never a Go type), and negative quotas or seconds are refused naming the setting.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		want       string // after "FILE"
	}{
		{"unknown top-level key", "listen: 127.0.0.1:0\npoolz: []\n", ":2: poolz: unknown key (known here: listen, data"},
		{"unknown key after a comment", "# comment\n\nlisten: x\nquota:\n  minute: 5\n  hourz: 3\n", ":6: quota.hourz: unknown key (known here: minute, hour, day)"},
		{"unknown nested key", "pools:\n  - id: a\n    gpuType: x\n    count: 1\n    adapter: docker\n    docker:\n      hots: y\n", ":7: pools[0].docker.hots: unknown key"},
		{"unknown key of an inline struct", "pools:\n  - id: a\n    gpuTyp: x\n", ":3: pools[0].gpuTyp: unknown key"},
		{"not a number", "quota:\n  minute: five\n", `:2: quota.minute: "five" is not a whole number`},
		{"a fraction for whole seconds", "autoscaler:\n  stableWindow: 1.5\n", `:2: autoscaler.stableWindow: "1.5" is not a whole number`},
		{"a bad duration", "fileTtl: 3x\n", `:1: fileTtl: "3x" is not a duration`},
		{"a list for a mapping", "quota: [1, 2]\n", ":1: quota: want a mapping of minute, hour, day, not a list"},
		{"a key given twice", "listen: a\ndata: d\nlisten: b\n", ":3: listen: given twice (first at line 1)"},
		{"a second document", "listen: a\n---\nlisten: b\n", ":2: a second YAML document"},
		{"a syntax error", "listen: a\ndata: [\n", ":2: did not find expected node content"},
		{"a tab for indentation", "quota:\n\tminute: 1\n", ":2: found character that cannot start any token"},
		{"negative minute quota", "quota:\n  minute: -5\n", ":2: quota.minute: -5 is negative"},
		{"negative day quota in flow style", "listen: a\nquota: {hour: 3, day: -1}\n", ":2: quota.day: -1 is negative"},
		{"negative autoscaler seconds", "autoscaler:\n  lbHold: -2\n", ":2: autoscaler.lbHold: -2 is negative"},
		{"a peer URL without a scheme", "listen: a\npeerUrl: 10.0.0.5:8080\n", `:2: peerUrl: "10.0.0.5:8080": want an http:// or https:// URL`},
		{"a peer URL without a host", "peerUrl: http://:8080\n", `:1: peerUrl: "http://:8080" names no host`},
		{"a peer URL with a query", "peerUrl: http://10.0.0.5:8080/?a=1\n", `:1: peerUrl: "http://10.0.0.5:8080/?a=1": want a base URL without credentials, query or fragment`},
		{"a negative docker timeout", "pools:\n  - id: a\n    gpuType: x\n    count: 1\n    adapter: docker\n    docker:\n      timeouts: {inspect: 5s, pull: -1m}\n",
			":7: pools[0].docker.timeouts.pull: -1m0s is negative"},
		{"a public URL of every interface", "publicUrl: http://0.0.0.0:8080\n", `:1: publicUrl: "http://0.0.0.0:8080" names every interface`},
		{"a public URL without a scheme", "listen: a\npublicUrl: gantry.example.com\n", `:2: publicUrl: "gantry.example.com": want an http:// or https:// URL`},
		{"a public URL with a query", "publicUrl: https://gantry.example.com/?a=1\n", `:1: publicUrl: "https://gantry.example.com/?a=1": want a base URL without credentials`},
		{"a peer URL of every interface", "peerUrl: http://0.0.0.0:8080\n", `:1: peerUrl: "http://0.0.0.0:8080" names every interface`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "gantry.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadConfig(path)
			if err == nil || !strings.HasPrefix(err.Error(), path+tc.want) {
				t.Errorf("LoadConfig(%q) = %v; want an error starting %q", tc.yaml, err, "FILE"+tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "server.") {
				t.Errorf("LoadConfig(%q) = %v; names a Go type", tc.yaml, err)
			}
		})
	}
}

// TestConfigQuotaDefaults: the windows a config file's quota leaves out keep their defaults.
func TestConfigQuotaDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml string
		want *core.Quota
	}{
		{"quota: {minute: 5}\n", &core.Quota{Minute: 5, Hour: DefaultQuota.Hour, Day: DefaultQuota.Day}},
		{"quota:\n  hour: 0\n", &core.Quota{Minute: DefaultQuota.Minute, Hour: 0, Day: DefaultQuota.Day}},
		{"quota: {minute: 1, hour: 2, day: 3}\n", &core.Quota{Minute: 1, Hour: 2, Day: 3}},
		{"listen: 127.0.0.1:0\n", &DefaultQuota},
	} {
		path := filepath.Join(t.TempDir(), "gantry.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(path)
		if err != nil || c.Quota == nil || *c.Quota != *tc.want {
			t.Errorf("LoadConfig(%q) = quota %+v, %v; want %+v", tc.yaml, c.Quota, err, *tc.want)
		}
	}
}

// TestConfigExpiredKeyGrace: expiredKeyGrace sets how long expired keys stay listed; a
// negative one is refused.
func TestConfigExpiredKeyGrace(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gantry.yaml")
	if err := os.WriteFile(path, []byte("expiredKeyGrace: 48h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := LoadConfig(path); err != nil || c.ExpiredKeyGrace != 48*time.Hour {
		t.Errorf("LoadConfig(expiredKeyGrace: 48h) = %v, %v; want 48h", c.ExpiredKeyGrace, err)
	}
	c := Config{ExpiredKeyGrace: -time.Hour}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "expiredKeyGrace -1h0m0s must not be negative") {
		t.Errorf("Validate(expiredKeyGrace -1h) = %v; want it refused", err)
	}
}
