package kit

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTailFile: the last n lines of a file, with and without a final newline.
func TestTailFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	long := strings.Repeat("x", 70000) // longer than a read block
	for _, tc := range []struct {
		content string
		n       int
		want    string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\nc\n", 0, "a\nb\nc\n"},
		{"a\nb\nc\n", 5, "a\nb\nc\n"},
		{"", 3, ""},
		{"\n\n", 1, "\n"},
		{long + "\n" + long + "\nend\n", 2, long + "\nend\n"},
	} {
		path := filepath.Join(dir, "log")
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		rc, err := TailFile(path, tc.n)
		if err != nil {
			t.Fatalf("TailFile(%.20q, %d) = %v", tc.content, tc.n, err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != tc.want {
			t.Errorf("TailFile(%.20q, %d) = %.30q; want %.30q", tc.content, tc.n, b, tc.want)
		}
	}
}
