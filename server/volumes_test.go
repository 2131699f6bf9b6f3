package server

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPrivateDataDirLeavesVolumes: making the data directory private leaves what the network
// volumes under volumes/ hold as the workers left it (a container's user may need to read
// it), while volumes/ itself and the rest become private.
func TestPrivateDataDirLeavesVolumes(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	vol := filepath.Join(data, volumesDir, "vol-1")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(vol, "weights.bin"), filepath.Join(data, "files.key")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(data, volumesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := privateDataDir(data); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{
		filepath.Join(data, "files.key"):  0o600,
		filepath.Join(data, volumesDir):   0o700,
		vol:                               0o777,
		filepath.Join(vol, "weights.bin"): 0o644,
	} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s after privateDataDir: %v, %v; want mode %v", path, fi.Mode().Perm(), err, want)
		}
	}
}
