-- Fewer index entries per job (issue 17). A take rewrites the row outside HOT (its status
-- changes), so it adds an entry to every live index whose predicate the new row meets.
--
-- Live jobs: the running jobs' holder and deadline share one partial index (running jobs are
-- few: Overdue reads them all), and the expiry index keeps only queued jobs (Expire finds the
-- running ones through the running index). A take now adds 2 entries (id, running), not 4.
DROP INDEX IF EXISTS gantry_jobs_held;
DROP INDEX IF EXISTS gantry_jobs_deadline;
DROP INDEX IF EXISTS gantry_jobs_expires;
CREATE INDEX IF NOT EXISTS gantry_jobs_running ON gantry_jobs (worker_id) WHERE status = 'IN_PROGRESS';
CREATE INDEX IF NOT EXISTS gantry_jobs_queued_expires ON gantry_jobs (expires_at) WHERE status = 'IN_QUEUE';
