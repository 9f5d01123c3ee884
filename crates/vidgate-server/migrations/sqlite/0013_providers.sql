-- The provider webhooks taken for a generation's provider job, by the
-- delivery's id (fal's request id, Replicate's `webhook-id`), so that a
-- provider's retry of a delivery already taken is answered and ignored, on
-- whichever node it lands.
CREATE TABLE provider_webhook_deliveries (
    generation_id  TEXT NOT NULL REFERENCES generations (id),
    delivery_id    TEXT NOT NULL,
    received_at    BIGINT NOT NULL,
    PRIMARY KEY (generation_id, delivery_id)
);

-- Each hosted provider's circuit as a node last saw it, saved when it
-- changes, for `vidgate admin providers`. Circuits live in each node's
-- memory; the row is the latest node's view.
CREATE TABLE provider_health (
    provider              TEXT PRIMARY KEY,
    open                  BOOLEAN NOT NULL,
    consecutive_failures  BIGINT NOT NULL,
    last_error            TEXT,
    last_error_at         BIGINT,
    latency_ms            BIGINT,
    node_id               TEXT NOT NULL,
    updated_at            BIGINT NOT NULL
);

-- Which hosted provider ran a succeeded generation and what it cost the
-- operator (from the backends file's dated price list; NULL when it has no
-- price), written by the update that captures the hold.
ALTER TABLE generations ADD COLUMN provider TEXT;
ALTER TABLE generations ADD COLUMN provider_cost_micros BIGINT;
