package core

import (
	"cmp"
	"fmt"
	"sync"
	"time"
)

// Default quotas of produced files (Files.JobQuota, Files.UserQuota).
const (
	DefaultJobFileQuota  = 64 << 20 // bytes all files of one job may take
	DefaultUserFileQuota = 1 << 30  // bytes the live files of one user's jobs may take at once
)

// fileLedger counts the bytes of the files stored in the last TTL (those the sweep has not
// removed yet), per job and per user, and reserves room for a file before it is written. It
// lives in memory: a restart forgets the files stored before it, and each replica counts the
// files it stored.
type fileLedger struct {
	mu      sync.Mutex
	entries []*fileEntry // by creation time, oldest first
	byJob   map[string]int64
	byUser  map[string]int64
}

type fileEntry struct {
	at        time.Time
	job, user string
	size      int64 // reserved, then the size written; 0 once released
}

// expire drops the entries created before cutoff. l.mu is held.
func (l *fileLedger) expire(cutoff time.Time) {
	n := 0
	for n < len(l.entries) && l.entries[n].at.Before(cutoff) {
		l.add(l.entries[n], -l.entries[n].size)
		l.entries[n] = nil
		n++
	}
	l.entries = l.entries[n:]
}

// add changes e's bytes by delta in the totals. l.mu is held.
func (l *fileLedger) add(e *fileEntry, delta int64) {
	if l.byJob == nil {
		l.byJob, l.byUser = map[string]int64{}, map[string]int64{}
	}
	for _, m := range [...]struct {
		totals map[string]int64
		key    string
	}{{l.byJob, e.job}, {l.byUser, e.user}} {
		if v := m.totals[m.key] + delta; v > 0 {
			m.totals[m.key] = v
		} else {
			delete(m.totals, m.key)
		}
	}
}

// reserve makes room for a file of job, owned by user: size bytes when known (>= 0), else as
// many as the quotas leave, up to MaxFileBytes. It returns the entry, whose size is the bytes
// reserved (the most the file may take), or a KindTooLarge error naming the quota that has no
// room.
func (fs *Files) reserve(job, user string, size int64) (*fileEntry, error) {
	jobQuota, userQuota := cmp.Or(fs.JobQuota, DefaultJobFileQuota), cmp.Or(fs.UserQuota, DefaultUserFileQuota)
	l := &fs.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	now := fs.Clock.Now()
	l.expire(now.Add(-fs.ttl()))
	jobUsed, userUsed := l.byJob[job], l.byUser[user]
	want := size
	if want < 0 {
		want = 1 // at least a byte, checked below; the rest as the quotas allow
	}
	if jobUsed+want > jobQuota {
		return nil, Errorf(KindTooLarge, "the job's files may take %s in all (the per-job file quota); it has stored %s, so %s",
			bytesText(jobQuota), bytesText(jobUsed), roomText(jobQuota-jobUsed, size))
	}
	if userUsed+want > userQuota {
		return nil, Errorf(KindTooLarge, "the files of one user's jobs may take %s at once (the per-user file quota); %s are stored, kept %v after each is made, so %s",
			bytesText(userQuota), bytesText(userUsed), fs.ttl(), roomText(userQuota-userUsed, size))
	}
	if size < 0 {
		size = min(MaxFileBytes, jobQuota-jobUsed, userQuota-userUsed)
	}
	e := &fileEntry{at: now, job: job, user: user, size: size}
	l.entries = append(l.entries, e)
	l.add(e, size)
	return e, nil
}

// settle sets a reserved entry's size to the bytes written (0: nothing was kept).
func (fs *Files) settle(e *fileEntry, written int64) {
	l := &fs.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	l.add(e, written-e.size)
	e.size = written
}

// roomText says what room is left against a file of size bytes (-1: unknown).
func roomText(left, size int64) string {
	if size < 0 {
		return "no room is left"
	}
	return fmt.Sprintf("this file of %s does not fit in the %s left", bytesText(size), bytesText(max(left, 0)))
}

// bytesText renders a byte count as people read quotas: "64 MiB", "1.5 MiB", "300 bytes".
func bytesText(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%.4g MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.4g KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
