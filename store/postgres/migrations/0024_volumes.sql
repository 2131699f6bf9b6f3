-- Users' network volumes (issue 30): the record as JSON, as endpoints and templates are kept.
-- The volumes the config file declares are not stored.
CREATE TABLE gantry_volumes (
    id         text PRIMARY KEY,
    owner      text NOT NULL,
    created_at timestamptz NOT NULL,
    body       jsonb NOT NULL
);
CREATE INDEX gantry_volumes_owner ON gantry_volumes (owner, created_at, id);
