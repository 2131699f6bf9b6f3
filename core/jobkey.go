package core

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// JobKey is a job id in binary form: 16 random bytes, and a last byte set for a runsync job. It
// holds no pointers, so the job index (maps, queues, deadlines) keyed by it costs the garbage
// collector next to nothing to scan, however many jobs are queued.
type JobKey [17]byte

// NewJobKey returns a random key; sync marks a runsync job.
func NewJobKey(sync bool) JobKey {
	var k JobKey
	_, _ = rand.Read(k[:16])
	if sync {
		k[16] = 1
	}
	return k
}

// String is the job id: a UUID-shaped hex string, prefixed "sync-" for runsync jobs as RunPod's
// are.
func (k JobKey) String() string {
	var b [41]byte
	n := 0
	if k[16] == 1 {
		n = copy(b[:], "sync-")
	}
	h := hex.EncodeToString(k[:16])
	for i, part := range []string{h[:8], h[8:12], h[12:16], h[16:20], h[20:]} {
		if i > 0 {
			b[n] = '-'
			n++
		}
		n += copy(b[n:], part)
	}
	return string(b[:n])
}

// ParseJobKey reads a job id; ok is false for anything String cannot have produced.
func ParseJobKey(id string) (k JobKey, ok bool) {
	if rest, found := strings.CutPrefix(id, "sync-"); found {
		id, k[16] = rest, 1
	}
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
		return JobKey{}, false
	}
	h := id[:8] + id[9:13] + id[14:18] + id[19:23] + id[24:]
	if _, err := hex.Decode(k[:16], []byte(h)); err != nil {
		return JobKey{}, false
	}
	return k, true
}
