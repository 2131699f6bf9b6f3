package postgres_test

import (
	"context"
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/store/postgres"
	"github.com/gantryhq/gantry/store/storetest"
)

// openJobs opens a job store on a fresh database, closed when t ends.
func openJobs(t *testing.T, url string) *postgres.Jobs {
	t.Helper()
	ctx := context.Background()
	db, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	s, err := postgres.OpenJobs(ctx, db, postgres.JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestJobStore(t *testing.T) {
	storetest.RunJobStore(t, func(t *testing.T) core.JobStore { return openJobs(t, pgtest.URL(t)) })
}
