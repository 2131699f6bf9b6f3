package filedir_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/filedir"
)

func TestDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	d, err := filedir.Open(filepath.Join(root, "files"))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	if n, err := d.CreateFile("a.png", strings.NewReader("hello"), 10, at); n != 5 || err != nil {
		t.Fatalf("CreateFile = %d, %v; want 5, nil", n, err)
	}
	if _, err := d.CreateFile("a.png", strings.NewReader("again"), 10, at); err == nil {
		t.Error("CreateFile of an existing name = nil; want an error (never overwritten)")
	}
	if _, err := d.CreateFile("big.png", strings.NewReader("12345678901"), 10, at); core.KindOf(err) != core.KindTooLarge {
		t.Errorf("CreateFile over max = %v; want too large", err)
	}
	for _, bad := range []string{"", "../x.png", "a/b.png", ".hidden"} {
		if _, err := d.CreateFile(bad, strings.NewReader("x"), 10, at); err == nil {
			t.Errorf("CreateFile(%q) = nil; want refused", bad)
		}
		if _, _, err := d.OpenFile(bad); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("OpenFile(%q) = %v; want not found", bad, err)
		}
	}
	rc, info, err := d.OpenFile("a.png")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hello" || info.Size != 5 || !info.Created.Equal(at) {
		t.Errorf("OpenFile = %q, %+v; want hello, 5 bytes, created %v", b, info, at)
	}
	if _, _, err := d.OpenFile("big.png"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("OpenFile(refused file) = %v; want not found (nothing left behind)", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "files")); len(entries) != 1 {
		t.Errorf("directory holds %d entries; want 1 (no temporary files left)", len(entries))
	}
	_, _ = d.CreateFile("b.png", strings.NewReader("later"), 10, at.Add(time.Hour))
	if n, err := d.RemoveBefore(at.Add(time.Minute)); n != 1 || err != nil {
		t.Errorf("RemoveBefore = %d, %v; want 1", n, err)
	}
	if _, _, err := d.OpenFile("b.png"); err != nil {
		t.Errorf("the newer file was removed: %v", err)
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
