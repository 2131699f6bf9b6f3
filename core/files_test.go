package core_test

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/store/filedir"
)

const pngHead = "\x89PNG\r\n\x1a\n"

func newFiles(t *testing.T) (*core.Files, *clock) {
	t.Helper()
	dir, err := filedir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := testkit.NewClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	return &core.Files{Store: dir, Key: bytes.Repeat([]byte{7}, 32), TTL: time.Hour, Clock: c}, c
}

// tamper changes a signature's first character, which carries six whole bits of it (its last
// carries fewer: changing that one can leave the signature as it was).
func tamper(sig string) string {
	b := []byte(sig)
	if b[0] == 'A' {
		b[0] = 'B'
	} else {
		b[0] = 'A'
	}
	return string(b)
}

func TestFilesSignedURLs(t *testing.T) {
	t.Parallel()
	fs, c := newFiles(t)
	const job = "sync-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	f, err := fs.Put(t.Context(), job, "png", strings.NewReader(pngHead+"pixels"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f.Name, job+"-") || !strings.HasSuffix(f.Name, ".png") || f.Size != 14 || f.ContentType != "image/png" ||
		!f.Expires.Equal(c.Now().Add(time.Hour)) {
		t.Fatalf("Put = %+v; want a name of the job, 14 bytes of image/png, expiring in an hour", f)
	}
	if p := f.Path(); !strings.HasPrefix(p, "/files/"+f.Name+"?expires=") || !strings.Contains(p, "&sig="+f.Sig) {
		t.Errorf("Path() = %q", p)
	}
	read := func(rc io.ReadSeekCloser) string {
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return string(b)
	}
	rc, info, format, err := fs.Open(t.Context(), f.Name, f.Expires.Unix(), f.Sig)
	if err != nil || read(rc) != pngHead+"pixels" || info.Size != 14 || format.ContentType != "image/png" {
		t.Fatalf("Open(signed URL) = %v, %+v, %+v", err, info, format)
	}
	// Tampering with the name, the expiry or the signature is refused; so is an expired URL.
	tests := []struct {
		name    string
		expires int64
		sig     string
		kind    core.Kind
	}{
		{f.Name, f.Expires.Unix() + 3600, f.Sig, core.KindForbidden},
		{strings.Replace(f.Name, ".png", ".gif", 1), f.Expires.Unix(), f.Sig, core.KindForbidden},
		{f.Name, f.Expires.Unix(), tamper(f.Sig), core.KindForbidden},
		{f.Name, f.Expires.Unix(), "", core.KindForbidden},
		{"../../etc/passwd", f.Expires.Unix(), f.Sig, core.KindForbidden},
	}
	for _, tt := range tests {
		if _, _, _, err := fs.Open(t.Context(), tt.name, tt.expires, tt.sig); core.KindOf(err) != tt.kind {
			t.Errorf("Open(%q, %d, %q) = %v; want kind %d", tt.name, tt.expires, tt.sig, err, tt.kind)
		}
	}
	c.Advance(time.Hour)
	if _, _, _, err := fs.Open(t.Context(), f.Name, f.Expires.Unix(), f.Sig); core.KindOf(err) != core.KindForbidden || !strings.Contains(err.Error(), "expired") {
		t.Errorf("Open after expiry = %v; want forbidden, expired", err)
	}
	// The sweep removes it; a link re-signed past the sweep finds nothing.
	c.Advance(time.Second)
	if n, err := fs.Sweep(t.Context()); n != 1 || err != nil {
		t.Errorf("Sweep = %d, %v; want 1 file removed", n, err)
	}
	if _, _, err := fs.OpenJobFile(t.Context(), job, f.Name); core.KindOf(err) != core.KindNotFound {
		t.Errorf("OpenJobFile after the sweep = %v; want not found", err)
	}
}

func TestFilesPut(t *testing.T) {
	t.Parallel()
	fs, _ := newFiles(t)
	tests := []struct {
		ext, body string
		ok        bool
	}{
		{"png", pngHead, true},
		{"gif", "GIF89a...", true},
		{"gif", "GIF87a...", true},
		{"wav", "RIFF\x00\x00\x00\x00WAVEfmt ", true},
		{"wav", "RIFF\x00\x00\x00\x00AVI LIST", false},
		{"png", "GIF89a", false},
		{"png", "", false},
		{"jpg", "\xff\xd8\xff", false},
	}
	for _, tt := range tests {
		_, err := fs.Put(t.Context(), "job-1", tt.ext, strings.NewReader(tt.body))
		if (err == nil) != tt.ok || (err != nil && core.KindOf(err) != core.KindInvalid) {
			t.Errorf("Put(%s, %q) = %v; want ok %v (or invalid)", tt.ext, tt.body, err, tt.ok)
		}
	}
	big := io.MultiReader(strings.NewReader(pngHead), io.LimitReader(zeros{}, core.MaxFileBytes))
	if _, err := fs.Put(t.Context(), "job-1", "png", big); core.KindOf(err) != core.KindTooLarge {
		t.Errorf("Put(over %d bytes) = %v; want too large", core.MaxFileBytes, err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestOpenJobFile(t *testing.T) {
	t.Parallel()
	fs, _ := newFiles(t)
	mine, _ := fs.Put(t.Context(), "job-a", "png", strings.NewReader(pngHead+"a"))
	theirs, _ := fs.Put(t.Context(), "job-ab", "png", strings.NewReader(pngHead+"b"))
	for _, ref := range []string{mine.Name, "https://gantry.example" + mine.Path(), "/files/" + mine.Name + "#x"} {
		rc, _, err := fs.OpenJobFile(t.Context(), "job-a", ref)
		if err != nil {
			t.Errorf("OpenJobFile(job-a, %q) = %v; want its file", ref, err)
			continue
		}
		rc.Close()
	}
	for _, ref := range []string{theirs.Name, "https://gantry.example" + theirs.Path(), "", "job-a", "job-a-x.txt"} {
		if _, _, err := fs.OpenJobFile(t.Context(), "job-a", ref); err == nil {
			t.Errorf("OpenJobFile(job-a, %q) = nil; want refused (not this job's file)", ref)
		}
	}
}

// TestFilesQuotas: a job's files, and the live files of a user's jobs, may take so many bytes
// in all; the file that would pass either is refused (too large, naming the quota) and not
// stored; a failed write and the files older than the TTL free their room.
func TestFilesQuotas(t *testing.T) {
	t.Parallel()
	fs, c := newFiles(t)
	fs.JobQuota, fs.UserQuota = 10<<10, 25<<10 // 10 KiB a job, 25 KiB a user
	png := func(n int) io.Reader { return strings.NewReader(pngHead + strings.Repeat("x", n-len(pngHead))) }
	unsized := func(n int) io.Reader { return io.MultiReader(png(n)) } // no Len: the size is learnt by writing
	put := func(job, user string, r io.Reader) error {
		_, err := fs.PutFor(t.Context(), job, user, "png", r)
		return err
	}
	steps := []struct {
		name, job, user string
		r               io.Reader
		refused         string // a part of the error; "" = stored
	}{
		{"a job's first file", "job-a", "alice", png(4 << 10), ""},
		{"its second", "job-a", "alice", png(4 << 10), ""},
		{"a third past the job's quota", "job-a", "alice", png(4 << 10), "the per-job file quota"},
		{"of unknown size, past it", "job-a", "alice", unsized(4 << 10), "quotas leave"},
		{"what is left of it", "job-a", "alice", unsized(2 << 10), ""},
		{"another job of the user", "job-b", "alice", png(9 << 10), ""},
		{"a third job past the user's quota", "job-c", "alice", png(8 << 10), "the per-user file quota"},
		{"another user's job", "job-d", "bob", png(10 << 10), ""},
	}
	for _, st := range steps {
		err := put(st.job, st.user, st.r)
		switch {
		case st.refused == "" && err != nil:
			t.Fatalf("%s: PutFor = %v; want it stored", st.name, err)
		case st.refused != "" && (core.KindOf(err) != core.KindTooLarge || !strings.Contains(err.Error(), st.refused)):
			t.Fatalf("%s: PutFor = %v; want too large, saying %q", st.name, err, st.refused)
		}
	}
	c.Advance(time.Hour + time.Second) // the files' links expired: the sweep removes them
	if err := put("job-c", "alice", png(8<<10)); err != nil {
		t.Errorf("after the TTL, PutFor = %v; want the user's room back", err)
	}
}
