package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
)

// TestSharedActivity: notes add up (polls count, stopPod and a reason stick), the activity
// read carries each noted worker's running jobs and heartbeat and leaves unnoted workers out,
// and ForgetWorker drops the notes.
func TestSharedActivity(t *testing.T) {
	t.Parallel()
	s := openJobs(t, pgtest.URL(t))
	ctx := context.Background()
	t0 := time.Now().UTC().Truncate(time.Microsecond)

	if acts, err := s.SharedActivity(ctx, []string{"w1"}); err != nil || len(acts) != 0 {
		t.Fatalf("SharedActivity before any note = %v, %v; want none", acts, err)
	}
	j := job("ep", t0)
	if _, err := s.Insert(ctx, j, []byte(`{}`), true); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Take(ctx, "ep", "w1", 1, t0); err != nil || len(got) != 1 {
		t.Fatalf("Take = %v, %v; want the job", got, err)
	}
	note := func(n core.WorkerNote, at time.Time) {
		t.Helper()
		if err := s.NoteWorker(ctx, "w1", n, at); err != nil {
			t.Fatalf("NoteWorker(%+v) = %v", n, err)
		}
	}
	note(core.WorkerNote{}, t0) // a first contact that is not a poll
	acts, err := s.SharedActivity(ctx, []string{"w1", "w2"})
	if err != nil || len(acts) != 1 {
		t.Fatalf("SharedActivity = %+v, %v; want w1 only", acts, err)
	}
	if a := acts[0]; a.Worker != "w1" || a.Polls != 0 || !a.PolledAt.IsZero() || a.StopPod || a.Unhealthy != "" ||
		!slices.Equal(a.Held, []string{j.ID}) || !a.Seen.Equal(t0) {
		t.Fatalf("after a contact: %+v; want no poll, holding %s, seen at %v", a, j.ID, t0)
	}

	t1, t2 := t0.Add(time.Second), t0.Add(2*time.Second)
	note(core.WorkerNote{Polled: true}, t2)
	note(core.WorkerNote{Polled: true, Unhealthy: "no GPU"}, t1) // late: polled_at keeps the later
	note(core.WorkerNote{StopPod: true}, t1)
	note(core.WorkerNote{}, t2) // says nothing: clears nothing
	if _, err := s.Update(ctx, j.ID, core.Statuses(core.InProgress), func(j *core.Job) error {
		j.Status, j.EndedAt = core.Completed, t2
		return nil
	}, true); err != nil {
		t.Fatal(err)
	}
	acts, err = s.SharedActivity(ctx, []string{"w1"})
	if err != nil || len(acts) != 1 {
		t.Fatalf("SharedActivity = %+v, %v; want w1", acts, err)
	}
	if a := acts[0]; a.Polls != 2 || !a.PolledAt.Equal(t2) || !a.StopPod || a.Unhealthy != "no GPU" || len(a.Held) != 0 {
		t.Fatalf("after notes: %+v; want 2 polls, the last at %v, stopPod, unhealthy, no job held", a, t2)
	}

	if err := s.ForgetWorker(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	if acts, err := s.SharedActivity(ctx, []string{"w1"}); err != nil || len(acts) != 0 {
		t.Fatalf("SharedActivity after ForgetWorker = %+v, %v; want none", acts, err)
	}
}

// TestWorkerFigures: readers get the newest epoch's figures only; a late write of an older
// epoch changes nothing, and a new epoch's leader hides what the old one published.
func TestWorkerFigures(t *testing.T) {
	t.Parallel()
	s := openJobs(t, pgtest.URL(t))
	ctx := context.Background()
	read := func() map[string]core.WorkerFigures {
		t.Helper()
		figs, err := s.ReadFigures(ctx)
		if err != nil {
			t.Fatalf("ReadFigures = %v", err)
		}
		return figs
	}
	publish := func(epoch int64, figs map[string]core.WorkerFigures) {
		t.Helper()
		if err := s.PublishFigures(ctx, epoch, figs); err != nil {
			t.Fatalf("PublishFigures(%d) = %v", epoch, err)
		}
	}
	if figs := read(); len(figs) != 0 {
		t.Fatalf("before any publish: %+v; want none", figs)
	}
	a := core.WorkerFigures{Idle: 1, Running: 2, UnhealthyReasons: []string{"x"}, Reason: "why", ColdStarts: 3, ColdStartLast: time.Second}
	b := core.WorkerFigures{Initializing: 1}
	publish(1, map[string]core.WorkerFigures{"a": a, "b": b})
	if figs := read(); len(figs) != 2 || !equalFigures(figs["a"], a) || !equalFigures(figs["b"], b) {
		t.Fatalf("after epoch 1: %+v; want a and b", figs)
	}
	publish(1, map[string]core.WorkerFigures{"b": {Running: 1}}) // a change of one endpoint
	if figs := read(); figs["b"].Running != 1 || !equalFigures(figs["a"], a) {
		t.Fatalf("after epoch 1's change: %+v; want b running, a as before", figs)
	}
	publish(2, nil) // a new leader with no figures yet
	if figs := read(); len(figs) != 0 {
		t.Fatalf("after epoch 2 began: %+v; want none (epoch 1's are stale)", figs)
	}
	publish(2, map[string]core.WorkerFigures{"a": {Idle: 5}})
	publish(1, map[string]core.WorkerFigures{"a": a, "b": b}) // the deposed leader, late
	if figs := read(); len(figs) != 1 || figs["a"].Idle != 5 {
		t.Fatalf("after a late epoch-1 write: %+v; want epoch 2's a only", figs)
	}
}

func equalFigures(f, g core.WorkerFigures) bool {
	return f.Idle == g.Idle && f.Running == g.Running && f.Initializing == g.Initializing && f.Unhealthy == g.Unhealthy &&
		f.Throttled == g.Throttled && f.Suspended == g.Suspended && f.Reason == g.Reason && f.ColdStarts == g.ColdStarts &&
		f.ColdStartLast == g.ColdStartLast && f.ColdStartTotal == g.ColdStartTotal && slices.Equal(f.UnhealthyReasons, g.UnhealthyReasons)
}
