package main

// The PostgreSQL scenario: Gantry's job store on PostgreSQL against a floor, a Go program that
// does only the SQL one job needs, on one durable PostgreSQL server that the bench starts
// itself (Debian's binaries, as the tests do); then 1, 2 and 3 `gantry serve` replicas on it;
// then the idle cost of three job stores with 1,000 endpoints.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/store/postgres"
)

// pgResult is one pass of jobs through PostgreSQL: the floor's or Gantry's.
type pgResult struct {
	jobs     int
	elapsed  time.Duration // first submission to last completion
	sub      loadResult    // the submissions (/run, or the floor's committed insert)
	pgCPU    float64       // CPU-seconds PostgreSQL spent in the pass
	replicas string        // what each replica did in the pass (replicaShares)
	takes    float64       // take statements per job (-pg-statements), -1 = not counted
}

func (r pgResult) jobsPerSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.jobs) / r.elapsed.Seconds()
}

// pgURL returns the URL of a fresh database on srv, with the pool size every client of the
// scenario uses.
func (b *bench) pgURL(srv *pgtest.Server, name string) (string, error) {
	url, err := pgtest.CreateDatabase(context.Background(), srv.AdminURL, fmt.Sprintf("%s_%d", name, time.Now().UnixNano()))
	if err != nil {
		return "", err
	}
	return url + "&pool_max_conns=" + strconv.Itoa(b.o.pgConns), nil
}

func (b *bench) scenarioPostgres() error {
	po := pgtest.Options{Durable: true}
	if b.o.pgStatements > 0 {
		po.Settings = []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=all", "pg_stat_statements.track_planning=on"}
	}
	srv, err := pgtest.Start(po)
	if err != nil {
		return fmt.Errorf("starting PostgreSQL: %w", err)
	}
	defer srv.Stop()
	n, clients, workers := b.o.pgJobs, b.o.e2eClients, b.o.e2eWorkers
	s := section{title: "PostgreSQL: the job store shared by replicas", noBare: true,
		gantryCol: "Measured", bareCol: "-",
		setup: fmt.Sprintf("One PostgreSQL 15 server (Debian's binaries, started by the bench: fsync on, synchronous_commit on, shared_buffers 128MB) on this machine. "+
			"Floor: %d jobs, %d Go clients each inserting a job (committed before the next), %d Go workers each taking one job "+
			"(UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1)) and marking it done (committed); an in-process signal wakes idle workers. "+
			"Gantry: the same %d jobs {\"input\":{\"echo\":1}} POSTed to /run by %d clients spread over the replicas, through %d gantry/echo worker processes. "+
			"Every client of the database (the floor, each replica) has a pool of %d connections.", n, clients, workers, n, clients, workers, b.o.pgConns)}

	floor, err := b.pgFloor(srv, n, clients, workers)
	if err != nil {
		return fmt.Errorf("PostgreSQL floor: %w", err)
	}
	logf("postgres floor: %.0f jobs/s, insert p50 %v p99 %v", floor.jobsPerSec(), floor.sub.P50, floor.sub.P99)
	s.rows = append(s.rows,
		row{"floor: jobs completed per second", fmt.Sprintf("%.0f jobs/s (%d in %.2f s)", floor.jobsPerSec(), floor.jobs, floor.elapsed.Seconds()), "", "", ""},
		row{"floor: committed insert p50 / p99", ms(floor.sub.P50) + " / " + ms(floor.sub.P99), "", "", ""},
		row{"floor: PostgreSQL CPU per job", fmt.Sprintf("%.0f µs", 1e6*floor.pgCPU/float64(n)), "", "", ""})

	if !b.gantryHasStore() {
		s.notes = append(s.notes, "Replicas not measured: this gantry binary has no `serve --store` (the wiring of the PostgreSQL store into the server has not landed).")
	} else {
		var one float64 // 1 replica's jobs/s
		for k := 1; k <= b.o.pgReplicas; k++ {
			r, err := b.pgGantry(srv, k, n, clients, workers)
			if err != nil {
				return fmt.Errorf("%d replicas: %w", k, err)
			}
			label := fmt.Sprintf("%d replica(s): ", k)
			ratio := r.jobsPerSec() / floor.jobsPerSec()
			jobs := row{label + "jobs completed per second", fmt.Sprintf("%.0f jobs/s (%d in %.2f s; %.2fx the floor)", r.jobsPerSec(), r.jobs, r.elapsed.Seconds(), ratio), "", "", ""}
			if k == 1 {
				one = r.jobsPerSec()
				jobs.target = ">= 0.7x the floor (16 cores)"
				jobs.verdict = b.coresVerdict(ratio >= 0.7, fmt.Sprintf("%.2fx", ratio))
			} else if want, ok := replicaTargets[k]; ok {
				jobs.target = fmt.Sprintf(">= %.1fx 1 replica (16 cores)", want)
				jobs.verdict = b.coresVerdict(r.jobsPerSec() >= want*one, fmt.Sprintf("%.2fx 1 replica", r.jobsPerSec()/one))
			}
			cpu := row{label + "PostgreSQL CPU per job", fmt.Sprintf("%.0f µs (%.2fx the floor's)", 1e6*r.pgCPU/float64(n), r.pgCPU/floor.pgCPU), "", "", ""}
			if k == 1 {
				cpu.target, cpu.verdict = "<= 1.0x the floor's", b.verdict("postgres", r.pgCPU <= floor.pgCPU, fmt.Sprintf("%.2fx", r.pgCPU/floor.pgCPU))
			}
			s.rows = append(s.rows, jobs,
				row{label + "/run p50 / p99", ms(r.sub.P50) + " / " + ms(r.sub.P99), "", "", ""}, cpu)
			if r.takes >= 0 {
				s.rows = append(s.rows, row{label + "take statements per job", fmt.Sprintf("%.2f", r.takes), "", "<= 0.3",
					b.verdict("postgres", r.takes <= 0.3, fmt.Sprintf("%.2f", r.takes))})
			}
			s.rows = append(s.rows, row{label + "each replica's share", r.replicas, "", "", ""})
		}
	}

	idle, err := b.pgIdle(srv)
	if err != nil {
		return fmt.Errorf("idle cost: %w", err)
	}
	s.rows = append(s.rows, row{fmt.Sprintf("idle: PostgreSQL CPU with 3 job stores and %d endpoints", b.o.pgIdleEndpoints),
		fmt.Sprintf("%.2f%% of a core (%.3f CPU-s over %v)", 100*idle.share, idle.cpu, idle.window), "", "<= 5% of a core",
		b.verdict("postgres", idle.share <= 0.05, fmt.Sprintf("%.2f%%", 100*idle.share))})
	s.notes = append(s.notes, fmt.Sprintf("Idle cost: three job stores (store/postgres.Jobs, as three replicas open them) on one database, each doing what an idle replica does: "+
		"core's tick every 250 ms (Expire, Overdue, Silent), the autoscaler's read of all %d endpoints' figures every 250 ms (EndpointStats: one grouped query a second per store), "+
		"a ListenAvailable listener, and %d parked takers (WaitAvailable) spread over the stores; no jobs. PostgreSQL's CPU is the postmaster's and its children's, from /proc.",
		b.o.pgIdleEndpoints, b.o.pgIdleTakers))
	s.notes = append(s.notes, "This machine is shared with other work (2 cores, several builds and tests at once): figures are noisy, and the ratios measured in one run matter more than the absolutes.")
	b.sections = append(b.sections, s)
	return nil
}

// pgFloor runs n jobs through the floor: only the SQL a job needs.
func (b *bench) pgFloor(srv *pgtest.Server, n, clients, workers int) (pgResult, error) {
	ctx := context.Background()
	url, err := b.pgURL(srv, "floor")
	if err != nil {
		return pgResult{}, err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return pgResult{}, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE floor_jobs (
			id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			status smallint NOT NULL,
			worker text,
			input  bytea NOT NULL);
		CREATE INDEX floor_jobs_queued ON floor_jobs (id) WHERE status = 0`); err != nil {
		return pgResult{}, err
	}
	input := []byte(`{"echo":1}`)
	wake := make(chan struct{}, workers)
	var done, next atomic.Int64
	var firstErr atomic.Value
	fail := func(err error) {
		if firstErr.Load() == nil {
			firstErr.Store(err)
		}
	}
	if err := b.pgStatementsReset(url); err != nil {
		return pgResult{}, err
	}
	waits := b.sampleWaits(url)
	cpu0 := pgCPU(srv)
	start := time.Now()
	var lat latencies
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			own := make([]time.Duration, 0, n/clients+16)
			for next.Add(1) <= int64(n) {
				t := time.Now()
				if _, err := pool.Exec(ctx, `INSERT INTO floor_jobs (status, input) VALUES (0, $1)`, input); err != nil {
					fail(err)
					return
				}
				own = append(own, time.Since(t))
				select {
				case wake <- struct{}{}:
				default:
				}
			}
			lat.add(own)
		})
	}
	finished := make(chan struct{})
	var workersWG sync.WaitGroup
	for w := range workers {
		worker := "w" + strconv.Itoa(w)
		workersWG.Go(func() {
			for done.Load() < int64(n) && firstErr.Load() == nil {
				var id int64
				var in []byte
				err := pool.QueryRow(ctx, `UPDATE floor_jobs SET status = 1, worker = $1
					WHERE id = (SELECT id FROM floor_jobs WHERE status = 0 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
					RETURNING id, input`, worker).Scan(&id, &in)
				if err != nil {
					if !strings.Contains(err.Error(), "no rows") {
						fail(err)
						return
					}
					select {
					case <-wake:
					case <-finished:
					case <-time.After(5 * time.Millisecond):
					}
					continue
				}
				if _, err := pool.Exec(ctx, `UPDATE floor_jobs SET status = 2 WHERE id = $1`, id); err != nil {
					fail(err)
					return
				}
				if done.Add(1) == int64(n) {
					close(finished)
				}
			}
		})
	}
	wg.Wait()
	workersWG.Wait()
	r := pgResult{jobs: int(done.Load()), elapsed: time.Since(start), pgCPU: pgCPU(srv) - cpu0}
	waits.log("floor")
	b.pgStatementsLog(url, n)
	b.pgTablesLog(url)
	r.sub = loadResult{Requests: int64(len(lat.all))}
	lat.summarize(&r.sub)
	if e := firstErr.Load(); e != nil {
		return r, e.(error)
	}
	return r, nil
}

// gantryHasStore reports whether `gantry serve` takes --store.
func (b *bench) gantryHasStore() bool {
	out, _ := exec.Command(b.o.gantryBin, "serve", "-h").CombinedOutput()
	return strings.Contains(string(out), "-store")
}

// pgGantry runs n jobs through k `gantry serve` replicas on one fresh database.
func (b *bench) pgGantry(srv *pgtest.Server, k, n, clients, workers int) (pgResult, error) {
	url, err := b.pgURL(srv, fmt.Sprintf("gantry%d", k))
	if err != nil {
		return pgResult{}, err
	}
	label := fmt.Sprintf("pg-%d", k)
	config := filepath.Join(b.tmp, label+"-config.yaml")
	pool := fmt.Sprintf("pools:\n  - {id: local, adapter: process, gpuType: CPU, displayName: CPU slot, count: 256, maxGpusPerWorker: 1, dataCenterId: LOCAL, cpu: true, vcpus: %d, memoryPerVcpu: 1}\n", runtime.NumCPU())
	if err := os.WriteFile(config, []byte(pool), 0o600); err != nil {
		return pgResult{}, err
	}
	var reps []*gantry
	defer func() {
		for _, g := range reps {
			g.stop()
		}
	}()
	for i := range k {
		data := filepath.Join(b.tmp, fmt.Sprintf("%s-%d-data", label, i))
		s, err := startProcess(fmt.Sprintf("gantry serve (%s #%d)", label, i), filepath.Join(b.tmp, fmt.Sprintf("%s-%d-gantry.log", label, i)),
			b.o.gantryBin, "serve", "--listen", "127.0.0.1:0", "--data", data, "--config", config, "--store", url,
			"--quota-minute", "0", "--quota-hour", "0", "--quota-day", "0")
		if err != nil {
			return pgResult{}, err
		}
		g := &gantry{server: s, bin: b.o.gantryBin, data: data}
		reps = append(reps, g)
		if err := waitHealthz(g.base); err != nil {
			return pgResult{}, err
		}
	}
	out, err := exec.Command(b.o.gantryBin, "keys", "create", "--store", url, "--user", "bench").Output()
	if err != nil {
		return pgResult{}, fmt.Errorf("gantry keys create --store: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	key := strings.TrimSpace(lines[len(lines)-1])
	for _, g := range reps {
		g.key = key
	}
	// The leader spreads the workers over the replicas it knows of: wait until it knows them
	// all (its roster, read every second), or every worker would poll the first ones.
	if err := reps[0].waitReplicas(k, 30*time.Second); err != nil {
		return pgResult{}, err
	}
	ep, err := reps[0].createEndpoint("bench-pg", workers, workers)
	if err != nil {
		return pgResult{}, err
	}
	logf("postgres: %d replica(s); waiting for %d idle workers", k, workers)
	// The leader starts the workers; any replica's /health shows them.
	if _, err := reps[0].waitWorkers(ep, workers, 180*time.Second); err != nil {
		return pgResult{}, err
	}
	urls := make([]string, k)
	for i, g := range reps {
		urls[i] = g.base + "/v2/" + ep + "/run"
	}
	if err := b.pgStatementsReset(url); err != nil {
		return pgResult{}, err
	}
	loads := make([]replicaLoad, k)
	for i, g := range reps {
		loads[i] = g.load()
	}
	waits := b.sampleWaits(url)
	cpu0 := pgCPU(srv)
	start := time.Now()
	sub := burstOver(urls, key, e2eBody, n, clients)
	c := newClient(1)
	deadline := time.Now().Add(max(3*time.Minute, time.Duration(n)*2*time.Millisecond))
	explained := false
	for {
		h, err := reps[len(reps)-1].health(c, ep) // a replica that did not start the workers
		if err == nil && !explained && h.Jobs.Completed >= int64(n/2) {
			explained = true
			b.pgExplainTake(url, ep)
		}
		if err == nil && h.Jobs.Completed+h.Jobs.Failed >= int64(n) {
			r := pgResult{jobs: int(h.Jobs.Completed), elapsed: time.Since(start), sub: sub, pgCPU: pgCPU(srv) - cpu0}
			after := make([]replicaLoad, k)
			for i, g := range reps {
				after[i] = g.load()
			}
			r.replicas = replicaShares(loads, after, n)
			logf("postgres: %d replica(s), each (start order; #0 leads): %s", k, r.replicas)
			logf("postgres: %d replica(s): %.0f jobs/s, /run p50 %v p99 %v, %d failed, %d submit errors", k, r.jobsPerSec(), sub.P50, sub.P99, h.Jobs.Failed, sub.Errors)
			waits.log(fmt.Sprintf("%d replica(s)", k))
			r.takes = b.pgStatementsLog(url, n)
			b.pgTablesLog(url)
			if h.Jobs.Failed > 0 || sub.Errors > 0 {
				return r, fmt.Errorf("%d jobs failed, %d submissions refused", h.Jobs.Failed, sub.Errors)
			}
			return r, nil
		}
		if time.Now().After(deadline) {
			return pgResult{}, fmt.Errorf("after %v /health says %+v", time.Since(start).Round(time.Second), h.Jobs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// plainURL is url without the pool's parameter (a single connection refuses it).
func plainURL(url string) string {
	u, _, _ := strings.Cut(url, "&pool_max_conns=")
	return u
}

// pgStatementsReset forgets the statements pg_stat_statements counted so far (with
// -pg-statements), making the extension in url's database first.
func (b *bench) pgStatementsReset(url string) error {
	if b.o.pgStatements <= 0 {
		return nil
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, plainURL(url))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset()`)
	return err
}

// pgStatementsLog logs the costliest statements in url's database since pgStatementsReset,
// per job of the n: calls, execution time, buffers dirtied and WAL bytes. It returns the take
// statements (FOR UPDATE SKIP LOCKED) per job, -1 when not counted.
func (b *bench) pgStatementsLog(url string, n int) (takes float64) {
	takes = -1
	if b.o.pgStatements <= 0 {
		return
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, plainURL(url))
	if err != nil {
		logf("pg_stat_statements: %v", err)
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	rows, err := conn.Query(ctx, `WITH st AS (SELECT * FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()))
		(SELECT calls, total_exec_time, total_plan_time, shared_blks_dirtied, wal_records, wal_bytes,
			regexp_replace(query, '\s+', ' ', 'g') FROM st ORDER BY total_exec_time + total_plan_time DESC LIMIT $1)
		UNION ALL SELECT sum(calls)::bigint, sum(total_exec_time), sum(total_plan_time), sum(shared_blks_dirtied)::bigint,
			sum(wal_records)::bigint, sum(wal_bytes), '(all statements)' FROM st
		UNION ALL SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(total_exec_time), 0), coalesce(sum(total_plan_time), 0),
			coalesce(sum(shared_blks_dirtied), 0)::bigint, coalesce(sum(wal_records), 0)::bigint, coalesce(sum(wal_bytes), 0),
			'(take statements: FOR UPDATE SKIP LOCKED)' FROM st WHERE query LIKE '%SKIP LOCKED%'`, b.o.pgStatements)
	if err != nil {
		logf("pg_stat_statements: %v", err)
		return
	}
	defer rows.Close()
	logf("pg_stat_statements, per job of %d: calls, exec µs, plan µs, blocks dirtied, WAL records, WAL bytes; statement", n)
	for rows.Next() {
		var calls, dirtied, walRecs int64
		var exec, plan float64
		var walBytes float64
		var q string
		if err := rows.Scan(&calls, &exec, &plan, &dirtied, &walRecs, &walBytes, &q); err != nil {
			logf("pg_stat_statements: %v", err)
			return
		}
		f := float64(n)
		logf("  %6.2f %8.1f %6.1f %6.2f %6.2f %8.0f  %.160s", float64(calls)/f, 1000*exec/f, 1000*plan/f, float64(dirtied)/f, float64(walRecs)/f, walBytes/f, q)
		if strings.HasPrefix(q, "(take statements") {
			takes = float64(calls) / f
		}
	}
	return takes
}

// burstOver is burst with the clients spread over several servers' URLs, client i on urls[i %
// len(urls)].
func burstOver(urls []string, key string, body []byte, n, clients int) loadResult {
	var next, errs atomic.Int64
	var lat latencies
	start := time.Now()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			p := newPoster(urls[i%len(urls)], key, body)
			defer p.close()
			own := make([]time.Duration, 0, n/clients+16)
			for next.Add(1) <= int64(n) {
				t := time.Now()
				ok, err := p.do()
				own = append(own, time.Since(t))
				if !ok || err != nil {
					errs.Add(1)
				}
			}
			lat.add(own)
		})
	}
	wg.Wait()
	r := loadResult{Requests: int64(len(lat.all)), Errors: errs.Load(), Elapsed: time.Since(start)}
	lat.summarize(&r)
	return r
}

// idleResult is PostgreSQL's CPU over a window while the stores idle.
type idleResult struct {
	cpu    float64
	window time.Duration
	share  float64 // of one core
}

// pgIdle measures what three idle job stores with many endpoints cost PostgreSQL.
func (b *bench) pgIdle(srv *pgtest.Server) (idleResult, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, err := b.pgURL(srv, "idle")
	if err != nil {
		return idleResult{}, err
	}
	endpoints := make([]string, b.o.pgIdleEndpoints)
	for i := range endpoints {
		endpoints[i] = fmt.Sprintf("ep%04d", i)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for r := range 3 {
		db, err := postgres.Open(ctx, url)
		if err != nil {
			return idleResult{}, err
		}
		defer db.Close()
		s := postgres.NewJobs(db, postgres.JobOptions{})
		if err := s.Start(ctx); err != nil {
			return idleResult{}, err
		}
		defer s.Stop()
		if err := s.ListenAvailable(ctx, func(string) {}); err != nil {
			return idleResult{}, err
		}
		readers := make([]func() core.QueueStats, len(endpoints))
		for i, ep := range endpoints {
			readers[i] = s.EndpointStats(ep)
		}
		wg.Go(func() { // core's tick and the autoscaler's
			t := time.NewTicker(250 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				now := time.Now()
				_, _ = s.Expire(ctx, now)
				_, _ = s.Overdue(ctx, now)
				_, _ = s.Silent(ctx, now.Add(-core.WorkerLostAfter))
				for _, read := range readers {
					_ = read()
				}
			}
		})
		for i := r; i < b.o.pgIdleTakers; i += 3 {
			ep := endpoints[i%len(endpoints)]
			wg.Go(func() {
				for ctx.Err() == nil {
					_ = s.WaitAvailable(ctx, ep)
				}
			})
		}
	}
	time.Sleep(5 * time.Second) // settle: connections made, first refreshes done
	window := b.o.pgIdleWindow
	cpu0 := pgCPU(srv)
	time.Sleep(window)
	cpu := pgCPU(srv) - cpu0
	r := idleResult{cpu: cpu, window: window, share: cpu / window.Seconds()}
	logf("postgres idle: %.3f CPU-s in %v: %.2f%% of a core", cpu, window, 100*r.share)
	return r, nil
}

// pgCPU returns the CPU-seconds the PostgreSQL server has used: the postmaster's, its
// children's that ended (reaped: cutime, cstime) and its live children's.
func pgCPU(srv *pgtest.Server) float64 {
	pm := postmaster(srv)
	total := procCPUAll(pm, true)
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pm))
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pm, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				total += procCPUAll(pid, false)
			}
		}
	}
	return total
}

var postmasters sync.Map // admin URL -> pid

// postmaster returns the pid of srv's postmaster: the parent of a backend.
func postmaster(srv *pgtest.Server) int {
	if pid, ok := postmasters.Load(srv.AdminURL); ok {
		return pid.(int)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.AdminURL)
	if err != nil {
		return 0
	}
	defer func() { _ = conn.Close(ctx) }()
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return 0
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", backend))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			pid, _ := strconv.Atoi(strings.TrimSpace(v))
			postmasters.Store(srv.AdminURL, pid)
			return pid
		}
	}
	return 0
}

// procCPUAll reads utime + stime of a process, with its reaped children's (cutime + cstime)
// when reaped is set, in seconds.
func procCPUAll(pid int, reaped bool) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	str := string(b)
	f := strings.Fields(str[strings.LastIndexByte(str, ')')+1:])
	fields := f[11:13] // utime, stime
	if reaped {
		fields = f[11:15] // and cutime, cstime
	}
	var ticks uint64
	for _, v := range fields {
		n, _ := strconv.ParseUint(v, 10, 64)
		ticks += n
	}
	return float64(ticks) / clockTicks
}

// pgExplainTake logs EXPLAIN (ANALYZE, BUFFERS) of a one-job take of the endpoint, as the
// store's take picks and moves it, in a transaction rolled back: the plan under load.
func (b *bench) pgExplainTake(url, endpoint string) {
	if b.o.pgStatements <= 0 {
		return
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, plainURL(url))
	if err != nil {
		logf("explain: %v", err)
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) WITH picked AS (
		SELECT id FROM gantry_jobs WHERE endpoint = $1 AND status = 'IN_QUEUE' AND expires_at > now()
		ORDER BY qseq LIMIT 1 FOR UPDATE SKIP LOCKED)
	UPDATE gantry_jobs j SET status = 'IN_PROGRESS', worker_id = 'explain', started_at = now(), rev = rev + 1
	FROM picked WHERE j.id = picked.id RETURNING j.id`, endpoint)
	if err != nil {
		logf("explain: %v", err)
		return
	}
	defer rows.Close()
	logf("EXPLAIN (ANALYZE, BUFFERS) of a take under load (rolled back):")
	for rows.Next() {
		var line string
		if rows.Scan(&line) == nil {
			logf("  %s", line)
		}
	}
}

// replicaTargets are issue 33's targets for k replicas' jobs/s, as multiples of one replica's.
var replicaTargets = map[int]float64{2: 1.3, 3: 1.6}

// coresVerdict judges a target set for 16 cores: on fewer, where the bench's clients, workers,
// replicas and PostgreSQL share the cores, the figure is shown but not judged.
func (b *bench) coresVerdict(met bool, detail string) string {
	if n := runtime.NumCPU(); n < 16 {
		return fmt.Sprintf("not judged on %d cores (%s)", n, detail)
	}
	return b.verdict("postgres", met, detail)
}
