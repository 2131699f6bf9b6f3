package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// TestSharedEndpointOwners runs two users' jobs on one platform endpoint: each sees, cancels,
// retries and streams only their own; purge-queue for one leaves the other's queue alone.
func TestSharedEndpointOwners(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.ep = &core.Endpoint{ID: "gantry-text", Owner: core.PlatformOwner, TimeoutMs: 60000}
	alice := r.submit(`{"n":1}`, func(s *core.Submission) { s.Owner = "alice" })
	bob := r.submit(`{"n":2}`, func(s *core.Submission) { s.Owner = "bob" })
	if alice.Owner != "alice" || bob.Owner != "bob" {
		t.Fatalf("owners = %q, %q; want alice, bob", alice.Owner, bob.Owner)
	}
	ref := func(id, owner string) core.JobRef { return core.JobRef{Endpoint: r.ep.ID, ID: id, Owner: owner} }
	ctx := context.Background()

	// Bob cannot see, wait on, stream, cancel or retry Alice's job: it is not found for him.
	ops := map[string]func() error{
		"Get":        func() error { _, err := r.jobs.Get(t.Context(), ref(alice.ID, "bob"), 0); return err },
		"Get ttl":    func() error { _, err := r.jobs.Get(t.Context(), ref(alice.ID, "bob"), time.Minute); return err },
		"Wait":       func() error { _, err := r.jobs.Wait(ctx, ref(alice.ID, "bob"), time.Hour); return err },
		"ReadStream": func() error { _, _, err := r.jobs.ReadStream(ctx, ref(alice.ID, "bob"), time.Hour); return err },
		"PeekStream": func() error { _, _, err := r.jobs.PeekStream(ctx, ref(alice.ID, "bob"), 0); return err },
		"Cancel":     func() error { _, err := r.jobs.Cancel(t.Context(), ref(alice.ID, "bob")); return err },
		"Retry":      func() error { _, err := r.jobs.Retry(t.Context(), ref(alice.ID, "bob")); return err },
	}
	for name, op := range ops {
		if err := op(); core.KindOf(err) != core.KindNotFound {
			t.Errorf("%s(alice's job as bob) = %v; want not found", name, err)
		}
	}
	if j, err := r.jobs.Get(t.Context(), ref(alice.ID, "alice"), 0); err != nil || j.ID != alice.ID {
		t.Errorf("Get(alice's job as alice) = %v, %v; want the job", j.ID, err)
	}
	if j, err := r.jobs.Get(t.Context(), ref(alice.ID, ""), 0); err != nil || j.ID != alice.ID {
		t.Errorf("Get(alice's job, any owner) = %v, %v; want the job", j.ID, err)
	}

	// Running (the record is attached) and finished (read from the store) jobs too.
	tk := r.take("w")
	if _, err := r.jobs.Cancel(t.Context(), ref(tk.ID, map[string]string{alice.ID: "bob", bob.ID: "alice"}[tk.ID])); core.KindOf(err) != core.KindNotFound {
		t.Errorf("Cancel(running job as the other user) = %v; want not found", err)
	}
	if err := r.jobs.Done(t.Context(), r.ep.ID, "w", tk.ID, core.Result{Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	other := map[string]string{alice.ID: "bob", bob.ID: "alice"}[tk.ID]
	if _, err := r.jobs.Retry(t.Context(), ref(tk.ID, other)); core.KindOf(err) != core.KindNotFound {
		t.Errorf("Retry(failed job as the other user) = %v; want not found", err)
	}
	if _, _, err := r.jobs.ReadStream(ctx, ref(tk.ID, other), time.Second); core.KindOf(err) != core.KindNotFound {
		t.Errorf("ReadStream(failed job as the other user) = %v; want not found", err)
	}
	if _, _, err := r.jobs.PeekStream(ctx, ref(tk.ID, other), 0); core.KindOf(err) != core.KindNotFound {
		t.Errorf("PeekStream(failed job as the other user) = %v; want not found", err)
	}

	// Purge for one owner cancels only their queued jobs.
	carol1 := r.submit(`{}`, func(s *core.Submission) { s.Owner = "carol" })
	carol2 := r.submit(`{}`, func(s *core.Submission) { s.Owner = "carol" })
	dave := r.submit(`{}`, func(s *core.Submission) { s.Owner = "dave" })
	if n := r.jobs.PurgeOwned(t.Context(), r.ep.ID, "carol"); n != 2 {
		t.Errorf("PurgeOwned(carol) = %d; want 2", n)
	}
	for id, want := range map[string]core.JobStatus{carol1.ID: core.Cancelled, carol2.ID: core.Cancelled, dave.ID: core.InQueue} {
		if got := r.status(id); got != want {
			t.Errorf("after purging carol's jobs, job %s is %s; want %s", id, got, want)
		}
	}
}
