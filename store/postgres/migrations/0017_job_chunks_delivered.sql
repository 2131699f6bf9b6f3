-- Drained stream chunks are kept, marked delivered, so that a reader that takes nothing (the
-- console) can still show them: the newest of them per job within core.MaxStreamKept bytes and
-- core.MaxStreamKeptParts chunks, until the job is queued again or removed. Only undelivered
-- chunks count as unread.
ALTER TABLE gantry_job_chunks ADD COLUMN delivered boolean NOT NULL DEFAULT false;
