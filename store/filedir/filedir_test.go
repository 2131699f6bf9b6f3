package filedir_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/gantryhq/gantry/store/filedir"
)

// The FileStore suite runs on Dir in the embedded backend's storetest.RunAll (store/pebble's
// TestStores), where the server opens it beside Pebble.

func open(t *testing.T, path string) *filedir.Dir {
	t.Helper()
	d, err := filedir.Open(path)
	if err != nil {
		t.Fatalf("Open(%q) = %v; want nil", path, err)
	}
	return d
}

// TestNamesStayInside: names that could leave the directory or pass for temporary files are
// refused, and no failed write leaves a temporary file behind.
func TestNamesStayInside(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	root := t.TempDir()
	d := open(t, filepath.Join(root, "files"))
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, bad := range []string{"", "../x.png", "a/b.png", `a\b.png`, ".hidden", ".tmp-1"} {
		if _, err := d.CreateFile(ctx, bad, strings.NewReader("x"), 10, at); err == nil {
			t.Errorf("CreateFile(%q) = nil; want refused", bad)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "x.png")); err == nil {
		t.Errorf("CreateFile(%q) wrote outside the directory", "../x.png")
	}
	_, _ = d.CreateFile(ctx, "big.png", strings.NewReader("12345678901"), 10, at)
	_, _ = d.CreateFile(ctx, "broken.png", iotest.ErrReader(errors.New("broken")), 10, at)
	if entries, _ := os.ReadDir(filepath.Join(root, "files")); len(entries) != 0 {
		t.Errorf("the directory holds %d entries after failed writes; want 0 (no temporary files left)", len(entries))
	}
}

func TestLoadKey(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "files.key")
	k1, err := filedir.LoadKey(path)
	if err != nil || len(k1) != filedir.KeySize {
		t.Fatalf("LoadKey (new) = %d bytes, %v", len(k1), err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode = %v; want 0600", st.Mode().Perm())
	}
	k2, err := filedir.LoadKey(path)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Errorf("LoadKey (again) = %x, %v; want the same key", k2, err)
	}
	short := filepath.Join(t.TempDir(), "short.key")
	_ = os.WriteFile(short, []byte("x"), 0o600)
	if _, err := filedir.LoadKey(short); err == nil {
		t.Error("LoadKey(a 1-byte key) = nil; want an error")
	}
}
