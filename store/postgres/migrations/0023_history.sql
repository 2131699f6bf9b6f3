-- Endpoints' history: one row per endpoint per minute of the counts of the jobs that ended
-- then (core.HistoryCounts). Every replica adds what ended on it; rows older than 25 hours
-- are trimmed. delay_hist and exec_hist are histograms over core.HistoryBounds.
CREATE TABLE gantry_history (
    endpoint     text NOT NULL,
    minute       timestamptz NOT NULL,
    completed    bigint NOT NULL,
    failed       bigint NOT NULL,
    timed_out    bigint NOT NULL,
    cancelled    bigint NOT NULL,
    delay_sum_ms bigint NOT NULL,
    exec_sum_ms  bigint NOT NULL,
    delay_hist   bigint[] NOT NULL,
    exec_hist    bigint[] NOT NULL,
    PRIMARY KEY (endpoint, minute)
);
CREATE INDEX gantry_history_minute ON gantry_history (minute);
