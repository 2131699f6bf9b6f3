-- The job store (store/postgres/jobs*.go; DESIGN.md, "The job store on PostgreSQL").
--
-- Live jobs (IN_QUEUE, IN_PROGRESS) sit in gantry_jobs, which stays small: a job that ends
-- moves to gantry_jobs_ended in the statement that ends it. gantry_jobs_ended is partitioned by
-- expires_at, an hour a partition; Expire hides what passed gantry_jobs_horizon and drops whole
-- partitions once the horizon is past them, so retention deletes no rows one by one and leaves
-- no dead tuples for VACUUM.

-- seq orders jobs by insertion (Job.Seq); qseq orders the queue (a requeued job gets a new one).
CREATE SEQUENCE gantry_job_seq;

CREATE TABLE gantry_jobs (
    id              text        PRIMARY KEY,
    endpoint        text        NOT NULL,
    owner           text        NOT NULL,
    status          text        NOT NULL,
    seq             bigint      NOT NULL,
    qseq            bigint      NOT NULL,
    low             boolean     NOT NULL,
    worker_id       text        NOT NULL,
    timeout_ms      bigint      NOT NULL,
    queued_at       timestamptz NOT NULL,
    started_at      timestamptz NOT NULL,
    deadline        timestamptz,          -- started_at + timeout_ms of a running job with a timeout
    expires_at      timestamptz NOT NULL,
    streamed        boolean     NOT NULL,
    webhook_pending boolean     NOT NULL,
    output          bytea,
    body            bytea       NOT NULL, -- the rest of the record, as JSON
    input           bytea       NOT NULL,
    rev             bigint      NOT NULL  -- bumped by every write: optimistic updates check it
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_cost_delay = 0);

CREATE INDEX gantry_jobs_queue    ON gantry_jobs (endpoint, qseq) WHERE status = 'IN_QUEUE';
CREATE INDEX gantry_jobs_held     ON gantry_jobs (worker_id) WHERE status = 'IN_PROGRESS';
CREATE INDEX gantry_jobs_deadline ON gantry_jobs (deadline) WHERE deadline IS NOT NULL;
CREATE INDEX gantry_jobs_expires  ON gantry_jobs (expires_at);
CREATE INDEX gantry_jobs_list     ON gantry_jobs (endpoint, seq);

CREATE TABLE gantry_jobs_ended (LIKE gantry_jobs) PARTITION BY RANGE (expires_at);
CREATE INDEX gantry_jobs_ended_id      ON gantry_jobs_ended (id);
CREATE INDEX gantry_jobs_ended_list    ON gantry_jobs_ended (endpoint, seq);
CREATE INDEX gantry_jobs_ended_expires ON gantry_jobs_ended (expires_at);

-- Ended jobs whose expires_at is at or before this are gone: Expire has reported them.
CREATE TABLE gantry_jobs_horizon (
    one boolean     PRIMARY KEY DEFAULT true CHECK (one),
    at  timestamptz NOT NULL
);
INSERT INTO gantry_jobs_horizon (at) VALUES ('-infinity');

-- Workers' last heartbeats (or takes), for worker loss.
CREATE TABLE gantry_job_heartbeats (
    worker text        PRIMARY KEY,
    seen   timestamptz NOT NULL
);

-- Unread stream chunks, in the order n gives; draining deletes them.
CREATE TABLE gantry_job_chunks (
    n       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id  text   NOT NULL,
    output  bytea  NOT NULL,
    metrics bytea,
    size    int    NOT NULL
);
CREATE INDEX gantry_job_chunks_job ON gantry_job_chunks (job_id, n);
