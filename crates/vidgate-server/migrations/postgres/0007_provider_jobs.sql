-- The job a generation has at a hosted provider (fal, Replicate). The row is
-- written before the submit (the intent: provider, target and the exact input
-- sent) and `job_id` is filled in when the provider answers, so that a later
-- attempt of the generation resumes that job, or looks for it by its input
-- when the submit's answer was lost, instead of paying for a second one.
CREATE TABLE provider_jobs (
    generation_id  TEXT PRIMARY KEY REFERENCES generations (id),
    provider       TEXT NOT NULL,
    target         TEXT NOT NULL,
    input          TEXT NOT NULL,
    intent_at      BIGINT NOT NULL,
    job_id         TEXT,
    submitted_at   BIGINT
);

CREATE INDEX provider_jobs_by_job ON provider_jobs (provider, job_id);
