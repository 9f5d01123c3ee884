-- Why a failover model's routing gave a generation's job to its provider
-- (`cheapest`, `fastest`, `first_healthy`, …; NULL for a model at one
-- provider, which routes nothing), written with the intent. `vidgate admin
-- providers` counts the decisions and each provider's share of recent jobs
-- from it, and times each provider's recent jobs from their intent to the
-- generation's end: the index keeps that read to the recent rows.
ALTER TABLE provider_jobs ADD COLUMN route_reason TEXT;

CREATE INDEX provider_jobs_recent ON provider_jobs (intent_at);
