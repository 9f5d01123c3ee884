-- Webhooks (the same logical schema as migrations/sqlite/0002): the outbox of
-- deliveries, the log of their attempts, and the previous signing secret that
-- stays valid for a while after a rotation.

-- After a rotation, deliveries are signed with both the new secret and the
-- previous one until this time (Unix milliseconds), so receivers can switch
-- over without dropping a message.
ALTER TABLE accounts ADD COLUMN previous_webhook_secret TEXT;
ALTER TABLE accounts ADD COLUMN previous_webhook_secret_expires_at BIGINT;

-- The outbox: one row per event to send, inserted in the transaction that
-- puts its generation in a final state, so an event is never lost between
-- the state change and the send.
CREATE TABLE webhook_deliveries (
    -- Also the `webhook-id` header, the same on every attempt.
    id               TEXT PRIMARY KEY,
    generation_id    TEXT NOT NULL REFERENCES generations (id),
    account_id       TEXT NOT NULL REFERENCES accounts (id),
    event_type       TEXT NOT NULL,
    url              TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    -- Attempts made so far (recorded ones; an attempt cut short by a crash
    -- is not counted and is made again).
    attempts         BIGINT NOT NULL DEFAULT 0,
    -- When a pending delivery is due. While a sender holds it, this is the
    -- end of the sender's lease: if the sender dies, the delivery falls due
    -- again then.
    next_attempt_at  BIGINT,
    lease_owner      TEXT,
    created_at       BIGINT NOT NULL,
    completed_at     BIGINT
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_generation ON webhook_deliveries (generation_id, created_at);

-- Append-only: one row per attempt, for the delivery log of the API.
CREATE TABLE webhook_attempts (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id      TEXT NOT NULL REFERENCES webhook_deliveries (id),
    attempt          BIGINT NOT NULL,
    started_at       BIGINT NOT NULL,
    duration_ms      BIGINT NOT NULL,
    -- The receiver's HTTP status, or NULL when there was no response.
    status_code      BIGINT,
    error            TEXT,
    -- The start of the response body (at most a few KiB).
    response_body    TEXT,
    -- When the next attempt was scheduled after this one, if any.
    next_attempt_at  BIGINT
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, id);
