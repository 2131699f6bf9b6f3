-- Job lists cost a page, not the backlog (issue 29). 0011 dropped the live table's list index
-- ("the live table is small"), so each list read every live job: with a million jobs queued by
-- one tenant, every tenant's list was a sequential scan, and on a ready-made model's endpoint
-- (shared by its users) a user's page also read the other users' jobs.
--
-- A page of an endpoint's jobs, newest first, now reads the (endpoint, seq) indexes of both
-- tables backwards from its cursor, merged in seq order, and stops at the page's end; a page
-- of one user's jobs on a shared endpoint reads the (endpoint, owner, seq) ones. The price is
-- two more index entries on the live table per insert and per take.
CREATE INDEX IF NOT EXISTS gantry_jobs_list ON gantry_jobs (endpoint, seq);
CREATE INDEX IF NOT EXISTS gantry_jobs_owner_list ON gantry_jobs (endpoint, owner, seq);
CREATE INDEX IF NOT EXISTS gantry_jobs_ended_owner_list ON gantry_jobs_ended (endpoint, owner, seq);
