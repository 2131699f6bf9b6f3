-- The ports other than jobs: management records, keys and users, the usage ledger, produced
-- files, worker tokens' key and revocations, and rate-limit windows.

-- Endpoints and templates: the record as JSON (the same encoding the embedded store keeps),
-- with the columns listings filter and order by. created_at keeps microseconds, as the
-- records' times do.
CREATE TABLE gantry_endpoints (
    id         text PRIMARY KEY,
    owner      text NOT NULL,
    created_at timestamptz NOT NULL,
    body       jsonb NOT NULL
);
CREATE INDEX gantry_endpoints_owner ON gantry_endpoints (owner, created_at, id);

CREATE TABLE gantry_templates (
    id         text PRIMARY KEY,
    owner      text NOT NULL,
    created_at timestamptz NOT NULL,
    body       jsonb NOT NULL
);
CREATE INDEX gantry_templates_owner ON gantry_templates (owner, created_at, id);

-- API keys, found by the SHA-256 of their secret; only the hash is kept.
CREATE TABLE gantry_keys (
    hash       text PRIMARY KEY,
    id         text NOT NULL,
    user_name  text NOT NULL,
    created_at timestamptz NOT NULL,
    body       jsonb NOT NULL
);
CREATE INDEX gantry_keys_id ON gantry_keys (id);
CREATE INDEX gantry_keys_user ON gantry_keys (user_name, created_at, id);

CREATE TABLE gantry_users (
    name text PRIMARY KEY,
    body jsonb NOT NULL
);

-- The usage ledger: one record per job (the primary key makes a second add a no-op).
CREATE TABLE gantry_usage (
    job_id text PRIMARY KEY,
    owner  text NOT NULL,
    at     timestamptz NOT NULL,
    body   jsonb NOT NULL
);
CREATE INDEX gantry_usage_owner ON gantry_usage (owner, at, job_id);

-- Produced files: every replica serves them, so their bytes live here too, in chunks of at
-- most 256 KiB so that neither a write nor a read holds a whole file in memory.
CREATE TABLE gantry_files (
    name       text PRIMARY KEY,
    size       bigint NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX gantry_files_created ON gantry_files (created_at);
CREATE TABLE gantry_file_chunks (
    name  text NOT NULL REFERENCES gantry_files (name) ON DELETE CASCADE,
    seq   integer NOT NULL,
    data  bytea NOT NULL,
    PRIMARY KEY (name, seq)
);

-- Named secrets (the worker-token signing key): created once, by whichever replica is first.
CREATE TABLE gantry_secrets (
    name  text PRIMARY KEY,
    value bytea NOT NULL
);

-- Worker-token revocations, until the revoked tokens expire. seq orders changes, so that a
-- replica catches up on those it missed by reading past the last it saw.
CREATE SEQUENCE gantry_revocations_seq;
CREATE TABLE gantry_revocations (
    worker    text PRIMARY KEY,
    until     timestamptz NOT NULL,
    seq       bigint NOT NULL DEFAULT nextval('gantry_revocations_seq')
);
CREATE INDEX gantry_revocations_seq_idx ON gantry_revocations (seq);

-- Rate-limit windows, one row per user holding the start (Unix seconds) and count of the
-- current minute, hour and day: one upsert checks and counts all three.
CREATE TABLE gantry_rate_limits (
    user_name text PRIMARY KEY,
    m_start   bigint NOT NULL,
    m_used    integer NOT NULL,
    h_start   bigint NOT NULL,
    h_used    integer NOT NULL,
    d_start   bigint NOT NULL,
    d_used    integer NOT NULL
);
