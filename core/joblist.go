package core

import (
	"context"
	"errors"
)

// ErrBadCursor is what a JobStore's List returns, wrapped, for a cursor it did not hand out.
var ErrBadCursor = errors.New("not a cursor this list handed out")

// JobPage is one page of an endpoint's jobs: Next is the cursor of the following page ("" =
// this is the last).
type JobPage struct {
	Jobs []Job
	Next string
}

// MaxJobPage is the most jobs one page of List holds.
const MaxJobPage = 100

// List returns the jobs of ref's endpoint that ref's caller may see (ref.ID is unused: on a
// shared endpoint, only ref.Owner's), newest first, in status (0 = any), a page of limit jobs
// (1 to MaxJobPage) after cursor ("" = the newest). Expired jobs are left out, as status no
// longer finds them. A cursor List did not hand out is KindInvalid (BadCursor).
func (js *Jobs) List(ctx context.Context, ref JobRef, status StatusSet, cursor string, limit int) (JobPage, error) {
	limit = min(max(limit, 1), MaxJobPage)
	jobs, next, err := js.store.List(ctx, JobFilter{Endpoint: ref.Endpoint, Owner: ref.Owner, Status: status, Cursor: cursor, Limit: limit})
	switch {
	case errors.Is(err, ErrBadCursor):
		return JobPage{}, BadCursor(cursor)
	case err != nil:
		return JobPage{}, Internal("listing the jobs", err)
	}
	now := js.clock.Now()
	page := JobPage{Jobs: make([]Job, 0, len(jobs)), Next: next}
	for _, j := range jobs {
		if check(JobRef{Endpoint: ref.Endpoint, Owner: ref.Owner, ID: j.ID}, &j, now) == nil {
			page.Jobs = append(page.Jobs, js.view(ctx, j))
		}
	}
	return page, nil
}
