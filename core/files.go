package core

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// FileStore keeps the files model jobs produce (images, speech, clips). Names are of the form
// Files makes ([a-z0-9-]+ and an extension); a store may refuse others, and never reaches
// outside its own files for any name. A call whose ctx is done returns an error that wraps
// ctx.Err() and, if it writes, leaves nothing behind.
type FileStore interface {
	// CreateFile writes a new file from r, at most max bytes (more is a KindTooLarge error and
	// leaves nothing behind), records created as its creation time, and returns its size. A
	// name that exists is an error; the file there is kept. The file is durable when
	// CreateFile returns.
	CreateFile(ctx context.Context, name string, r io.Reader, max int64, created time.Time) (int64, error)
	// OpenFile opens a file for reading; ErrNotFound when there is none.
	OpenFile(ctx context.Context, name string) (io.ReadSeekCloser, FileInfo, error)
	// RemoveBefore removes the files created before t and returns how many it removed.
	RemoveBefore(ctx context.Context, t time.Time) (int, error)
}

// FileInfo describes a stored file.
type FileInfo struct {
	Size    int64
	Created time.Time
}

// Limits of produced files.
const (
	MaxFileBytes   = 64 << 20      // bytes in one file
	DefaultFileTTL = 1 * time.Hour // how long a file's URL works (and the file is kept)
)

// FileFormat is a kind of file a job may store: its extension, Content-Type and the bytes it
// starts with.
type FileFormat struct {
	Ext         string
	ContentType string
	matches     func(head []byte) bool
}

// FileFormats are the formats jobs may store, by extension.
var FileFormats = map[string]FileFormat{
	"png": {"png", "image/png", func(h []byte) bool { return bytes.HasPrefix(h, []byte("\x89PNG\r\n\x1a\n")) }},
	"gif": {"gif", "image/gif", func(h []byte) bool {
		return bytes.HasPrefix(h, []byte("GIF87a")) || bytes.HasPrefix(h, []byte("GIF89a"))
	}},
	"wav": {"wav", "audio/wav", func(h []byte) bool {
		return len(h) >= 12 && string(h[:4]) == "RIFF" && string(h[8:12]) == "WAVE"
	}},
}

// fileNameRE is the form of every stored file's name: the job id, a random part, the extension.
var fileNameRE = regexp.MustCompile(`^[a-z0-9-]{1,100}\.(png|gif|wav)$`)

// StoredFile is a file a job stored, with its signed URL's parts.
type StoredFile struct {
	Name        string
	Size        int64
	ContentType string
	Expires     time.Time // the URL works until then
	Sig         string
}

// Path is the URL path and query that serve the file: /files/<name>?expires=<unix>&sig=<sig>.
func (f StoredFile) Path() string {
	return "/files/" + f.Name + "?expires=" + strconv.FormatInt(f.Expires.Unix(), 10) + "&sig=" + f.Sig
}

// Files stores the files running jobs produce and serves them at expiring signed URLs: the
// signature is an HMAC of the file's name and expiry under a key only Gantry holds, so a URL
// cannot be forged or extended, and needs no API key to fetch.
type Files struct {
	Store FileStore
	Key   []byte        // the HMAC key: secret, at least 32 bytes
	TTL   time.Duration // how long a URL works, and the file is kept; 0 = DefaultFileTTL
	Clock Clock
	// JobQuota is the bytes all the files of one job may take; 0 = DefaultJobFileQuota.
	JobQuota int64
	// UserQuota is the bytes the files of one user's jobs may take at once, counting those
	// stored in the last TTL (the sweep removes older ones); 0 = DefaultUserFileQuota. Each
	// replica counts the files it stored, since it started.
	UserQuota int64

	ledger fileLedger
}

func (fs *Files) ttl() time.Duration { return cmp.Or(fs.TTL, DefaultFileTTL) }

// sign returns the signature of a name and expiry (Unix seconds).
func (fs *Files) sign(name string, expires int64) string {
	m := hmac.New(sha256.New, fs.Key)
	m.Write([]byte(name + "\n" + strconv.FormatInt(expires, 10)))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Put stores a file that job jobID produced, as PutFor does for a job whose owner is unknown
// (its files count against the quota of user "").
func (fs *Files) Put(ctx context.Context, jobID, ext string, r io.Reader) (StoredFile, error) {
	return fs.PutFor(ctx, jobID, "", ext, r)
}

// PutFor stores a file that job jobID of user owner produced, in the format ext names (its
// first bytes must match), and returns it with a URL signature valid for the TTL. A file that
// would take the job's or the user's files past JobQuota or UserQuota is refused
// (KindTooLarge, naming the quota). When r has a Len method (a buffered body), the file's
// size is known before it is written; otherwise it may take what the quotas leave.
func (fs *Files) PutFor(ctx context.Context, jobID, owner, ext string, r io.Reader) (StoredFile, error) {
	f, ok := FileFormats[ext]
	if !ok {
		return StoredFile{}, Invalid(FieldError{"query.ext", fmt.Sprintf("unknown file format %q (png, gif or wav)", ext)})
	}
	size := int64(-1)
	if l, ok := r.(interface{ Len() int }); ok {
		size = int64(l.Len())
	}
	br := bufio.NewReaderSize(r, 512)
	head, _ := br.Peek(12)
	if !f.matches(head) {
		return StoredFile{}, Invalid(FieldError{"$.body", fmt.Sprintf("the body is not a %s file (it does not start as one)", strings.ToUpper(ext))})
	}
	name := strings.ToLower(jobID) + "-" + NewID(10) + "." + ext
	if !fileNameRE.MatchString(name) {
		return StoredFile{}, Errorf(KindInvalid, "job id %q cannot name a file", jobID)
	}
	if size > MaxFileBytes {
		return StoredFile{}, Errorf(KindTooLarge, "a file may take at most %s; this one takes %s", bytesText(MaxFileBytes), bytesText(size))
	}
	room, err := fs.reserve(strings.ToLower(jobID), owner, size)
	if err != nil {
		return StoredFile{}, err
	}
	now := fs.Clock.Now()
	size, err = fs.Store.CreateFile(ctx, name, br, min(MaxFileBytes, room.size), now)
	if err != nil {
		fs.settle(room, 0)
		if KindOf(err) == KindTooLarge {
			if room.size < MaxFileBytes {
				return StoredFile{}, Errorf(KindTooLarge, "the file does not fit in the %s its job's and its user's file quotas leave", bytesText(room.size))
			}
			return StoredFile{}, err
		}
		return StoredFile{}, Internal("storing the file", err)
	}
	fs.settle(room, size)
	expires := now.Add(fs.ttl()).Truncate(time.Second)
	return StoredFile{Name: name, Size: size, ContentType: f.ContentType, Expires: expires,
		Sig: fs.sign(name, expires.Unix())}, nil
}

// Open checks a signed URL's name, expiry and signature and opens the file: a signature that
// does not match, or an expiry that has passed, is KindForbidden; a file no longer there is
// KindNotFound.
func (fs *Files) Open(ctx context.Context, name string, expires int64, sig string) (io.ReadSeekCloser, FileInfo, FileFormat, error) {
	if !fileNameRE.MatchString(name) || !hmac.Equal([]byte(sig), []byte(fs.sign(name, expires))) {
		return nil, FileInfo{}, FileFormat{}, Errorf(KindForbidden, "the link's signature does not match: use the URL exactly as the job's output gave it")
	}
	if at := time.Unix(expires, 0); !fs.Clock.Now().Before(at) {
		return nil, FileInfo{}, FileFormat{}, Errorf(KindForbidden, "the link expired at %s; files are kept %v after they are produced", at.UTC().Format(time.RFC3339), fs.ttl())
	}
	rc, info, err := fs.open(ctx, name)
	return rc, info, FileFormats[name[strings.LastIndexByte(name, '.')+1:]], err
}

func (fs *Files) open(ctx context.Context, name string) (io.ReadSeekCloser, FileInfo, error) {
	rc, info, err := fs.Store.OpenFile(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, FileInfo{}, Errorf(KindNotFound, "file %q not found (files are removed %v after they are produced)", name, fs.ttl())
	case err != nil:
		return nil, FileInfo{}, Internal("opening the file", err)
	}
	return rc, info, nil
}

// OpenJobFile opens a file that job jobID stored, by the name or signed URL its output gave.
// A file of another job is refused: a job cannot pass off another's file as its own.
func (fs *Files) OpenJobFile(ctx context.Context, jobID, nameOrURL string) (io.ReadSeekCloser, FileInfo, error) {
	name := nameOrURL
	if i := strings.Index(name, "/files/"); i >= 0 {
		name = name[i+len("/files/"):]
	}
	if i := strings.IndexAny(name, "?#"); i >= 0 {
		name = name[:i]
	}
	if !fileNameRE.MatchString(name) || !strings.HasPrefix(name, strings.ToLower(jobID)+"-") {
		return nil, FileInfo{}, fmt.Errorf("%q is not a file this job stored", nameOrURL)
	}
	return fs.open(ctx, name)
}

// Sweep removes the files whose URLs have expired.
func (fs *Files) Sweep(ctx context.Context) (int, error) {
	return fs.Store.RemoveBefore(ctx, fs.Clock.Now().Add(-fs.ttl()))
}

// ContextReader reads from r until ctx is done, then answers ctx's error: a FileStore's copy
// from a slow client stops when the request is abandoned.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return ctxReader{ctx, r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
