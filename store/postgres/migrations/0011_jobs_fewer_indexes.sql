-- Few indexes on the live jobs: a take or an end writes an entry in each. Listing the live
-- jobs of an endpoint reads them all (the live table is small); the ended ones are listed by
-- index.
DROP INDEX IF EXISTS gantry_jobs_list;
