package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnmappedImageRefused creates endpoints on the process pool: an image it has no
// `images:` entry for is refused (422) naming the pool and the fix, while a mapped image and a
// built-in one are created.
func TestUnmappedImageRefused(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	cfg := filepath.Join(t.TempDir(), "gantry.yaml")
	if err := os.WriteFile(cfg, []byte("images:\n  mapped/worker:1: [python3, handler.py]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	s := startServe(t, bin, "--data", data, "--config", cfg)
	key := newKey(t, bin, data)
	for _, tc := range []struct {
		image string
		code  int
		want  []string // in the body
	}{
		{"other/worker:1", 422, []string{`$.image: no listed pool can run image \"other/worker:1\": pool local (process) has no images: entry for \"other/worker:1\"`, "under images: in the config file"}},
		{"mapped/worker:1", 201, nil},
		{"gantry/echo", 201, nil},
	} {
		code, body := call(t, "POST", s.base+"/v2/serverless", key,
			`{"name":"x","type":"QUEUE","image":"`+tc.image+`","gpu":{"pools":["local"]},"scaling":{"type":"QUEUE_DELAY","queueDelay":4}}`)
		if code != tc.code {
			t.Errorf("create with image %s = %d %s; want %d", tc.image, code, body, tc.code)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("create with image %s: body %s; want it to contain %s", tc.image, body, w)
			}
		}
	}
	s.stop(t)
}
