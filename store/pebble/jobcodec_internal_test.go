package pebble

import (
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// A queued job's record is encoded on every /run: into one buffer sized once, beside the
// encoder's own nesting stack (it took six allocations growing from empty). Not parallel: it
// counts allocations.
func TestEncodeJobSizesItsBufferOnce(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	j := &core.Job{ID: "0123abcd-0123-4567-89ab-0123456789ab", Endpoint: "flne72ny10hkfj", Owner: "alice", Status: core.InQueue,
		Policy: core.JobPolicy{ExecutionTimeoutMs: 600000, TTLMs: 86400000}, TimeoutMs: 600000, Seq: 1234567,
		CreatedAt: now, QueuedAt: now, Retention: core.RunRetention, ExpiresAt: now.Add(24 * time.Hour)}
	if got := testing.AllocsPerRun(100, func() { encodeJob(j) }); got > 2 {
		t.Errorf("encodeJob allocates %.0f times; want at most 2", got)
	}
	var back core.Job
	if err := decodeJob(encodeJob(j), &back); err != nil || back.ID != j.ID || back.Seq != j.Seq || !back.ExpiresAt.Equal(j.ExpiresAt) {
		t.Errorf("decodeJob(encodeJob(j)) = %+v, %v; want j back", back, err)
	}
}
