package telemetry_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/telemetry"
)

// TestJobsForget: Forget drops a deleted endpoint's series, and a job of it that ends later (one
// that was running when it was deleted) does not bring them back; other endpoints are kept.
func TestJobsForget(t *testing.T) {
	t.Parallel()
	m := telemetry.NewJobs()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	job := func(ep string) *core.Job {
		return &core.Job{Endpoint: ep, Status: core.Completed, QueuedAt: t0, StartedAt: t0.Add(time.Second), EndedAt: t0.Add(2 * time.Second)}
	}
	for _, ep := range []string{"gone", "kept"} {
		m.JobTaken(job(ep))
		m.JobEnded(job(ep), core.InProgress)
	}
	if n := testutil.CollectAndCount(m); n != 6 {
		t.Fatalf("%d series before Forget; want 6 (delay, execution, ended of each endpoint)", n)
	}
	m.Forget("gone")
	m.JobTaken(job("gone"))
	m.JobEnded(job("gone"), core.InProgress)
	if n := testutil.CollectAndCount(m); n != 3 {
		t.Errorf("%d series after Forget and a late job; want 3 (the kept endpoint's)", n)
	}
}
