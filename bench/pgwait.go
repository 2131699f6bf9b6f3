package main

// A sampler of what PostgreSQL's active backends wait on during a pass, and the live tables'
// figures after it: the evidence for where a take's time goes (issue 33).

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// waitSampler counts the wait events of url's database's active backends, sampled every
// 10 ms from pg_stat_activity while it runs.
type waitSampler struct {
	stop    context.CancelFunc
	done    sync.WaitGroup
	samples int
	active  int            // active backends seen, summed over the samples
	counts  map[string]int // "type/event" ("CPU" when not waiting) -> backends seen so
}

// sampleWaits starts a sampler on url's database (nil with -pg-statements 0).
func (b *bench) sampleWaits(url string) *waitSampler {
	if b.o.pgStatements <= 0 {
		return nil
	}
	ctx, stop := context.WithCancel(context.Background())
	w := &waitSampler{stop: stop, counts: map[string]int{}}
	conn, err := pgx.Connect(ctx, plainURL(url))
	if err != nil {
		logf("wait sampler: %v", err)
		stop()
		return nil
	}
	w.done.Go(func() {
		defer func() { _ = conn.Close(context.Background()) }()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// A lock wait names what it waits for: the relation, or the kind of lock.
			rows, err := conn.Query(ctx, `SELECT coalesce(a.wait_event_type || '/' || a.wait_event, 'CPU') ||
					CASE WHEN a.wait_event_type = 'Lock' THEN coalesce((SELECT ' ' || coalesce(l.relation::regclass::text, l.locktype) || ' ' || l.mode
						FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted LIMIT 1), '') ELSE '' END
				FROM pg_stat_activity a
				WHERE a.datname = current_database() AND a.state = 'active' AND a.pid <> pg_backend_pid()`)
			if err != nil {
				return
			}
			w.samples++
			for rows.Next() {
				var ev string
				if rows.Scan(&ev) == nil {
					w.counts[ev]++
					w.active++
				}
			}
			rows.Close()
		}
	})
	return w
}

// log stops the sampler and logs the wait events seen, as mean active backends per sample
// (a lock wait with the relation or lock kind, and the mode, it waits for).
func (w *waitSampler) log(label string) {
	if w == nil {
		return
	}
	w.stop()
	w.done.Wait()
	if w.samples == 0 {
		return
	}
	type ev struct {
		name string
		n    int
	}
	var evs []ev
	for k, n := range w.counts {
		evs = append(evs, ev{k, n})
	}
	slices.SortFunc(evs, func(a, b ev) int { return b.n - a.n })
	var parts []string
	lock, lw := 0, 0
	for _, e := range evs {
		parts = append(parts, fmt.Sprintf("%s %.2f", e.name, float64(e.n)/float64(w.samples)))
		switch {
		case strings.HasPrefix(e.name, "Lock/"):
			lock += e.n
		case strings.HasPrefix(e.name, "LWLock/"):
			lw += e.n
		}
	}
	logf("wait events (%s), %d samples, mean active backends %.2f: Lock %.3f, LWLock %.3f; %s", label, w.samples,
		float64(w.active)/float64(w.samples), float64(lock)/float64(w.samples), float64(lw)/float64(w.samples), strings.Join(parts, ", "))
}

// pgTablesLog logs the live job tables' and their indexes' figures in url's database: dead
// tuples, scans, tuples read.
func (b *bench) pgTablesLog(url string) {
	if b.o.pgStatements <= 0 {
		return
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, plainURL(url))
	if err != nil {
		logf("tables: %v", err)
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	rows, err := conn.Query(ctx, `SELECT relname, n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, n_tup_del, autovacuum_count
		FROM pg_stat_user_tables WHERE relname IN ('gantry_jobs', 'floor_jobs', 'gantry_job_heartbeats') ORDER BY relname`)
	if err == nil {
		for rows.Next() {
			var name string
			var live, dead, upd, hot, del, av int64
			if rows.Scan(&name, &live, &dead, &upd, &hot, &del, &av) == nil {
				logf("  table %s: live %d, dead %d, updates %d (HOT %d), deletes %d, autovacuums %d", name, live, dead, upd, hot, del, av)
			}
		}
		rows.Close()
	}
	rows, err = conn.Query(ctx, `SELECT indexrelname, idx_scan, idx_tup_read, idx_tup_fetch, pg_relation_size(indexrelid)
		FROM pg_stat_user_indexes WHERE relname IN ('gantry_jobs', 'floor_jobs') ORDER BY indexrelname`)
	if err == nil {
		for rows.Next() {
			var name string
			var scans, read, fetch, size int64
			if rows.Scan(&name, &scans, &read, &fetch, &size) == nil {
				logf("  index %s: scans %d, tuples read %d, fetched %d, %d kB", name, scans, read, fetch, size>>10)
			}
		}
		rows.Close()
	}
}
