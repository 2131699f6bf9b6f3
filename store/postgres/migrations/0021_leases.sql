-- Leader leases: one row per lease, with the term's epoch. Not UNLOGGED: a crash of the
-- database must not reset epochs, or a deposed leader's fenced writes could pass again.
CREATE TABLE gantry_leases (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    epoch      bigint NOT NULL,
    expires_at timestamptz NOT NULL
);
