-- One provider job belongs to one generation at most: two webhooks adopting
-- one job at once, or a webhook and a reconcile, must not give it to two
-- generations. The index that found a job's generation becomes unique
-- (NULLs, the intents still waiting for an answer, stay distinct).
--
-- A job that two generations already share keeps only the first to record
-- it; the others forget the id, so a running one reconciles its intent
-- again (skipping the job, which another generation has) instead of
-- following another generation's job.
UPDATE provider_jobs SET job_id = NULL, submitted_at = NULL
WHERE job_id IS NOT NULL AND EXISTS (
    SELECT 1 FROM provider_jobs AS earlier
    WHERE earlier.provider = provider_jobs.provider
      AND earlier.job_id = provider_jobs.job_id
      AND (COALESCE(earlier.submitted_at, 0) < COALESCE(provider_jobs.submitted_at, 0)
           OR (COALESCE(earlier.submitted_at, 0) = COALESCE(provider_jobs.submitted_at, 0)
               AND earlier.generation_id < provider_jobs.generation_id))
);

DROP INDEX provider_jobs_by_job;
CREATE UNIQUE INDEX provider_jobs_by_job ON provider_jobs (provider, job_id);
