-- Workers shared by replicas (issue 17; store/postgres/workers_shared.go). A worker is
-- registered by the replica whose scheduler started it (the leader) but may poll, post and
-- ping through any replica. What a replica hears from a worker it did not register is noted
-- here, coalesced (a first contact, polls at most every few seconds, a stopPod, an unhealthy
-- reason: never a write per job); the registering replica reads the notes with the jobs the
-- worker holds (gantry_jobs) and its heartbeat (gantry_job_heartbeats) once a second.
CREATE TABLE gantry_worker_notes (
    worker    text        PRIMARY KEY,
    polls     bigint      NOT NULL, -- polls noted; grows
    polled_at timestamptz,          -- the last noted poll
    stop_pod  boolean     NOT NULL,
    unhealthy text        NOT NULL, -- '' = healthy
    heard     timestamptz NOT NULL  -- the last note
);

-- The leader's worker figures for /health, by endpoint, with the epoch of the term that wrote
-- them: a deposed leader's late write does not overwrite a newer term's, and readers take only
-- the newest epoch's rows. The row of endpoint '' records the epoch alone.
CREATE TABLE gantry_worker_figures (
    endpoint text   PRIMARY KEY,
    epoch    bigint NOT NULL,
    body     jsonb  NOT NULL
);
