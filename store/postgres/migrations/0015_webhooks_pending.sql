-- Undelivered webhooks of ended jobs (issue 17): the leader looks for those whose replica
-- died with the delivery in flight once a minute (core.Jobs.redeliverOrphanedWebhooks). A
-- partial index keeps that look from reading every ended job: only marked rows are in it,
-- and a delivered webhook leaves it.
CREATE INDEX IF NOT EXISTS gantry_jobs_ended_webhook_pending ON gantry_jobs_ended (seq) WHERE webhook_pending;
